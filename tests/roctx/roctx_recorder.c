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
#include <stdio.h>
#include <stdlib.h>

#include "../marker_lines.h"

typedef uint64_t roctx_range_id_t;

static int depth; /* guarded by the line log's lock */

static char *format(const char *kind, const char *message) {
    char *line = NULL;
    return asprintf(&line, "%s %s", kind, message ? message : "") >= 0 ? line : NULL;
}

EXPORT roctx_range_id_t roctxRangeStartA(const char *message) {
    roctx_range_id_t id = new_range_id();
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

MARKER_LINE_EXPORTS(roctx_recorder)
