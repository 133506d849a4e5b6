/* The line log of the marker-range stand-ins (tests/nvtx, tests/roctx; test support).
 *
 * Each keeps, in call order, one heap-allocated line per marker call it receives, and numbers
 * the ranges it opens. MARKER_LINE_EXPORTS(prefix) defines the two calls a test reads the log
 * through with ctypes: int prefix_count(void) and const char *prefix_line(int index), NULL
 * past the end. Included once per library: everything here is that library's own.
 */
#ifndef MARKER_LINES_H
#define MARKER_LINES_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))

#define MAX_LINES 4096
static char *lines[MAX_LINES];
static int count;
static uint64_t next_id = 1;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Keep `line` (taking it over); a NULL (a failed asprintf) is dropped, a line past the last
 * one kept is freed. */
static void record(char *line) {
    if (!line) {
        return;
    }
    pthread_mutex_lock(&lock);
    if (count < MAX_LINES) {
        lines[count++] = line;
    } else {
        free(line);
    }
    pthread_mutex_unlock(&lock);
}

/* The id of the next range opened: 1, 2, ... */
static uint64_t new_range_id(void) {
    pthread_mutex_lock(&lock);
    uint64_t id = next_id++;
    pthread_mutex_unlock(&lock);
    return id;
}

#define MARKER_LINE_EXPORTS(prefix)                                                            \
    EXPORT int prefix##_count(void) {                                                          \
        pthread_mutex_lock(&lock);                                                             \
        int n = count;                                                                         \
        pthread_mutex_unlock(&lock);                                                           \
        return n;                                                                              \
    }                                                                                          \
    EXPORT const char *prefix##_line(int index) {                                              \
        pthread_mutex_lock(&lock);                                                             \
        const char *line = index >= 0 && index < count ? lines[index] : NULL;                  \
        pthread_mutex_unlock(&lock);                                                           \
        return line;                                                                           \
    }

#endif
