/* A stand-in for libroctx64.so that records the ranges it receives (test support).
 *
 * roctx is the marker API of ROCm's profilers: a program calls roctxRangeStartA and
 * roctxRangeStop, and rocprofv3 --marker-trace (which preloads its roctx library) shows each
 * range on its timeline. This library exports the same calls, under the same names and types
 * as roctx.h declares them, and keeps, in call order, one line per call:
 *
 *     start <range id> <message>
 *     stop <range id>
 *     push <message>          pop                 mark <message>
 *
 * (only start and stop are expected from eventapi; the others are recorded so that a call of
 * them shows up as a wrong line rather than a missing symbol). Tests read the lines through
 * roctx_recorder_count() and roctx_recorder_line(i), opening this same file with ctypes
 * (dlopen returns the handle already loaded).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))

typedef uint64_t roctx_range_id_t;

#define MAX_LINES 4096
static char *lines[MAX_LINES];
static int count;
static roctx_range_id_t next_id = 1;
static int depth;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

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

static char *format(const char *kind, const char *message) {
    char *line = NULL;
    return asprintf(&line, "%s %s", kind, message ? message : "") >= 0 ? line : NULL;
}

EXPORT roctx_range_id_t roctxRangeStartA(const char *message) {
    pthread_mutex_lock(&lock);
    roctx_range_id_t id = next_id++;
    pthread_mutex_unlock(&lock);
    char *line = NULL;
    if (asprintf(&line, "start %llu %s", (unsigned long long)id, message ? message : "") >= 0) {
        record(line);
    }
    return id;
}

EXPORT void roctxRangeStop(roctx_range_id_t id) {
    char *line = NULL;
    if (asprintf(&line, "stop %llu", (unsigned long long)id) >= 0) {
        record(line);
    }
}

EXPORT int roctxRangePushA(const char *message) {
    record(format("push", message));
    pthread_mutex_lock(&lock);
    int level = depth++;
    pthread_mutex_unlock(&lock);
    return level;
}

EXPORT int roctxRangePop(void) {
    record(format("pop", NULL));
    pthread_mutex_lock(&lock);
    int level = depth > 0 ? --depth : -1;
    pthread_mutex_unlock(&lock);
    return level;
}

EXPORT void roctxMarkA(const char *message) { record(format("mark", message)); }

EXPORT int roctx_recorder_count(void) {
    pthread_mutex_lock(&lock);
    int n = count;
    pthread_mutex_unlock(&lock);
    return n;
}

EXPORT const char *roctx_recorder_line(int index) {
    pthread_mutex_lock(&lock);
    const char *line = index >= 0 && index < count ? lines[index] : NULL;
    pthread_mutex_unlock(&lock);
    return line;
}
