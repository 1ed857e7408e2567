/* What the adaptive kernel (htda/coordinator/_adaptive.c) hands the simulator's compiled cache
 * (htda/simulator/_replay.c) so that an access and a key read cost no Python call and no dict lookup:
 * Kernel._c_api() returns a capsule of this struct (None when a subclass overrides access). */

#ifndef HTDA_ADAPTIVE_API_H
#define HTDA_ADAPTIVE_API_H

#include <Python.h>

#define HTDA_ADAPTIVE_API_NAME "htda.coordinator._adaptive.API"

/* the layouts of a cache an adaptive rating may ask for (htda.coordinator.adaptive.PLAIN, ASKING, PROBATION,
 * LIRS), the share of the cache a probation queue fills (PROBATION_SHARE) and a LIRS queue (LIRS_SHARE) */
enum { HTDA_PLAIN = 0, HTDA_ASKING = 1, HTDA_PROBATION = 2, HTDA_LIRS = 3 };
#define HTDA_PROBATION_SHARE 0.1
#define HTDA_LIRS_SHARE 0.01

typedef struct {
    /* kernel.access(group, t, 1.0, size), except that group does not join _touched (the simulator never takes
     * it: a set insertion a request, and a set as large as the groups a chunk reads, for nothing); *slot is
     * where the kernel keeps group if the caller knows it (-1 if not; any stale value is looked up again), and
     * is set to it.  0, or -1 with an exception set. */
    int (*access)(PyObject *kernel, PyObject *group, Py_ssize_t *slot, double t, double size);
    /* kernel.keys()[group] into *key if slot is still group's: 1; else 0 (look the key up in the dict). */
    int (*key)(PyObject *kernel, PyObject *group, Py_ssize_t slot, double *key);
    /* kernel.layout: how the cache should lay itself out now */
    int (*layout)(PyObject *kernel);
    /* kernel.settled: on probation, whether the files read once that the cache holds go on probation too */
    int (*settled)(PyObject *kernel);
} HtdaAdaptiveAPI;

#endif
