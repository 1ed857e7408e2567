/* htda/_kernel.h: what the two C kernels (htda/coordinator/_adaptive.c, htda/simulator/_replay.c) share.
 *
 * - htda_grow: resize a PyMem array, setting MemoryError on failure;
 * - htda_prefault: map in at once the pages of a large zeroed array that will all be written;
 * - HtdaTagSlot: a slot of an index by 64-bit hash (32 bits of the hash and 1 + a place), probed linearly from
 *   htda_home, and htda_empty_slot to add one (the simulator's file and group tables, the rating's group index);
 * - HTDA_HEAP: the sift steps of a binary min-heap in an array, for an entry type and an order of one's own
 *   (both kernels keep lazy heaps of (key, id) whose ties must break exactly as Python's tuples do, so the order
 *   is theirs to give);
 * - HTDA_RING: a FIFO in a ring buffer, for an item type of one's own (the probation queues and ghost lists);
 * - HTDA_MODULE: a module holding one type, made by multi-phase initialisation. */

#ifndef HTDA_KERNEL_H
#define HTDA_KERNEL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#ifdef __linux__
#include <sys/mman.h>
#include <unistd.h>
#endif

/* *array resized to count items of item bytes; -1 with MemoryError set (the old array stays valid) */
static inline int
htda_grow(void **array, Py_ssize_t count, size_t item)
{
    void *bigger = PyMem_Realloc(*array, (size_t)count * item);
    if (bigger == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *array = bigger;
    return 0;
}

/* Map in now the whole pages of [start, start + bytes), as if written, where the kernel can (Linux 5.14 and
 * later); else nothing.  A large calloc-ed table probed by hash (read first, written after) otherwise takes two
 * page faults a page as it fills, one to map the shared zero page and one to copy it at the first write: on
 * Corda's 90,000 objects, half a run's page faults (docs/simulator-history.rst, *Replay speed*).  Every page of
 * such a table is written anyway (its records land at random), so mapping them at once costs no memory. */
static inline void
htda_prefault(void *start, size_t bytes)
{
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
    long size = sysconf(_SC_PAGESIZE); /* 4 KiB on x86-64, up to 64 KiB elsewhere: madvise wants it aligned */
    uintptr_t page = size > 0 ? (uintptr_t)size : 4096, from = ((uintptr_t)start + page - 1) & ~(page - 1),
              to = ((uintptr_t)start + bytes) & ~(page - 1);
    if (to > from)
        (void)madvise((void *)from, to - from, MADV_POPULATE_WRITE);
#else
    (void)start;
    (void)bytes;
#endif
}

/* A slot of an open-addressing index by a well-mixed 64-bit hash, power-of-two sized, probed linearly: the hash's
 * high half as a tag, so that a probe reads a record only when its tag matches, and 1 + the place of the record
 * the slot names (0: an empty slot).  8 bytes, where a slot holding a 64-bit key and a place would be 16. */
typedef struct {
    uint32_t tag;
    uint32_t at;
} HtdaTagSlot;

/* the most records such an index can name (a place is 32 bits) */
#define HTDA_MOST_PLACES ((Py_ssize_t)UINT32_MAX - 1)

/* where hash's probe sequence starts in an index of mask + 1 slots */
static inline Py_ssize_t
htda_home(Py_ssize_t mask, uint64_t hash)
{
    return (Py_ssize_t)(hash >> 17) & mask;
}

/* the slot of hash's tag */
static inline uint32_t
htda_tag(uint64_t hash)
{
    return (uint32_t)(hash >> 32);
}

/* the first empty slot of hash's probe sequence in index (an index with room) */
static inline HtdaTagSlot *
htda_empty_slot(HtdaTagSlot *index, Py_ssize_t mask, uint64_t hash)
{
    Py_ssize_t i = htda_home(mask, hash);
    while (index[i].at)
        i = (i + 1) & mask;
    return &index[i];
}

/* name##_sift_up(ctx, entries, pos), name##_sift_down(ctx, entries, n, pos) and name##_heapify(ctx, entries, n) over
 * a heap of n Entry, least first by LT(ctx, a, b) (a strictly before b; ctx: whatever the order needs, may be
 * unused).  The heap is 4-ary: half the levels of a binary heap, and a node's children side by side, so a pop
 * from a large heap misses the cache half as often (a shadow cache's evictions were an eighth of a replay).  Its
 * least entry is the same whatever the arity, so are the victims. */
#define HTDA_HEAP(name, Entry, Ctx, LT)                                                                              \
    static void name##_sift_up(Ctx *ctx, Entry *e, Py_ssize_t pos)                                                  \
    {                                                                                                                \
        Entry item = e[pos];                                                                                         \
        while (pos > 0) {                                                                                            \
            Py_ssize_t parent = (pos - 1) >> 2;                                                                      \
            if (!LT(ctx, &item, &e[parent]))                                                                         \
                break;                                                                                               \
            e[pos] = e[parent];                                                                                      \
            pos = parent;                                                                                            \
        }                                                                                                            \
        e[pos] = item;                                                                                               \
    }                                                                                                                \
                                                                                                                     \
    static void name##_sift_down(Ctx *ctx, Entry *e, Py_ssize_t n, Py_ssize_t pos)                                  \
    {                                                                                                                \
        Entry item = e[pos];                                                                                         \
        for (;;) {                                                                                                   \
            Py_ssize_t first = 4 * pos + 1, child = first;                                                           \
            if (first >= n)                                                                                          \
                break;                                                                                               \
            Py_ssize_t last = first + 4 < n ? first + 4 : n;                                                         \
            for (Py_ssize_t c = first + 1; c < last; c++)                                                            \
                if (LT(ctx, &e[c], &e[child]))                                                                       \
                    child = c;                                                                                       \
            if (!LT(ctx, &e[child], &item))                                                                          \
                break;                                                                                               \
            e[pos] = e[child];                                                                                       \
            pos = child;                                                                                             \
        }                                                                                                            \
        e[pos] = item;                                                                                               \
    }                                                                                                                \
                                                                                                                     \
    static void name##_heapify(Ctx *ctx, Entry *e, Py_ssize_t n)                                                    \
    {                                                                                                                \
        for (Py_ssize_t pos = (n - 2) / 4; n > 1 && pos >= 0; pos--)                                                 \
            name##_sift_down(ctx, e, n, pos);                                                                        \
    }

/* A FIFO of Item in a ring (name##_ring: n items from head in an array of cap, a power of 2): name##_at(ring, i)
 * (the i-th oldest), name##_push(ring, item) (-1 with MemoryError set), name##_pop(ring) (the oldest, removed;
 * the ring is not empty) */
#define HTDA_RING(name, Item)                                                                                        \
    typedef struct {                                                                                                 \
        Item *a;                                                                                                     \
        Py_ssize_t head, n, cap;                                                                                     \
    } name##_ring;                                                                                                   \
                                                                                                                     \
    static inline Item *name##_at(const name##_ring *ring, Py_ssize_t i)                                             \
    {                                                                                                                \
        return &ring->a[(ring->head + i) & (ring->cap - 1)];                                                         \
    }                                                                                                                \
                                                                                                                     \
    static int name##_push(name##_ring *ring, Item item)                                                             \
    {                                                                                                                \
        if (ring->n == ring->cap) { /* a ring twice as large, its items in order from 0 */                          \
            Py_ssize_t cap = ring->cap ? 2 * ring->cap : 256;                                                        \
            Item *a = PyMem_Malloc((size_t)cap * sizeof(Item));                                                      \
            if (a == NULL) {                                                                                         \
                PyErr_NoMemory();                                                                                    \
                return -1;                                                                                           \
            }                                                                                                        \
            for (Py_ssize_t i = 0; i < ring->n; i++)                                                                 \
                a[i] = *name##_at(ring, i);                                                                          \
            PyMem_Free(ring->a);                                                                                     \
            ring->a = a;                                                                                             \
            ring->head = 0;                                                                                          \
            ring->cap = cap;                                                                                         \
        }                                                                                                            \
        *name##_at(ring, ring->n++) = item;                                                                          \
        return 0;                                                                                                    \
    }                                                                                                                \
                                                                                                                     \
    static Item name##_pop(name##_ring *ring)                                                                        \
    {                                                                                                                \
        Item first = ring->a[ring->head];                                                                            \
        ring->head = (ring->head + 1) & (ring->cap - 1);                                                             \
        ring->n--;                                                                                                   \
        return first;                                                                                                \
    }

/* PyInit_##short_name for the module full_name whose one attribute type_name is the type of spec; setup() runs
 * first (module constants; 0, or -1 with an exception set) */
#define HTDA_MODULE(short_name, full_name, doc, spec, type_name, setup)                                              \
    static int module_exec(PyObject *module)                                                                         \
    {                                                                                                                \
        if (setup() < 0)                                                                                             \
            return -1;                                                                                               \
        PyObject *type = PyType_FromModuleAndSpec(module, &(spec), NULL);                                            \
        if (type == NULL)                                                                                            \
            return -1;                                                                                               \
        int failed = PyModule_AddObjectRef(module, type_name, type);                                                 \
        Py_DECREF(type);                                                                                             \
        return failed;                                                                                               \
    }                                                                                                                \
                                                                                                                     \
    static PyModuleDef_Slot module_slots[] = {                                                                       \
        {Py_mod_exec, module_exec},                                                                                  \
        {0, NULL},                                                                                                   \
    };                                                                                                               \
                                                                                                                     \
    static struct PyModuleDef module_def = {                                                                         \
        PyModuleDef_HEAD_INIT,                                                                                       \
        .m_name = full_name,                                                                                         \
        .m_doc = doc,                                                                                                \
        .m_size = 0,                                                                                                 \
        .m_slots = module_slots,                                                                                     \
    };                                                                                                               \
                                                                                                                     \
    PyMODINIT_FUNC PyInit_##short_name(void) { return PyModuleDef_Init(&module_def); }

#endif
