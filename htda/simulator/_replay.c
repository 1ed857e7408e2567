/* htda.simulator._replay: the cache of HTDAPolicy (htda/simulator/htda_policy.py) in C.
 *
 * The request loop is the simulator's hot path.  In Python it cost about three times the adaptive rating it
 * drives, mostly in memory traffic: a dozen dict probes a request, each a miss on a large trace, into tables
 * of boxed ints and floats.  Here the cache keeps its own tables:
 * - files: an open-addressing table by file id of File records (its first group, its other groups if any,
 *   and while it is cached its size and the key of its one live heap entry): one probe a request;
 * - groups: an open-addressing table by group id of Group records (the group's object, its bytes, the time of
 *   its last recorded access);
 * - the eviction heap: a heap (4-ary) of (key, file id) pairs, lazy as before (keys only grow; an entry whose
 *   key went stale is pushed again with its current key when it reaches the top).  Every cached file has one
 *   entry and (key, id) pairs are compared as Python compares (float, int) tuples, so the heap pops exactly the
 *   entries heapq popped, whatever its layout.
 * The rating stays the policy's object, called once an access (vectorcall) and read through its keys() dict
 * (or key() for a file of several groups); each group is always passed as the same object, so the rating's
 * own dicts find it by identity.  The steps and their order are those of the Python loop the tests keep as a
 * reference (tests/simulator/test_compiled.py), so hits, bytes, staging and eviction are the same.
 *
 * An adaptive rating may also say that the cache should ask the admission question (its attribute
 * `admitting`, htda.coordinator.adaptive): a missed file then displaces the lowest-keyed files only while its
 * group's key before this access (rating.before(group)) is above theirs; at the first victim it does not beat it
 * stays out, and the victims that went before it stay gone (as in TinyLFU); files of its own group go unasked.
 *
 * Or it may say that new files go on probation (its `layout`, PROBATION): S3-FIFO's quick demotion in front of
 * the lowest-key order.  A missed file then enters a FIFO queue instead of the heap; while the queue holds
 * PROBATION_SHARE of the capacity (or the heap is empty) its oldest file leaves it when room is needed: into the
 * heap if it was read again while queued (it, or its group by a later job: the unit the rating's shadows replay),
 * else out of the cache, its id and size remembered in a FIFO ghost
 * list (at most the rest of the capacity); a missed file found there goes straight to the heap.  Once the rating
 * lays the cache out otherwise, the next miss moves the queue into the heap and forgets the ghost list.
 * The files the heap held when the probation began stay there, and the heap gives up room only as fast as files
 * leave the queue read again: at a large size, what a layout before admitted unread would stay for good.  So
 * once the rating has *settled* on probation (its `settled`), the next miss puts on probation, behind the
 * queue, every file of the heap whose group was read only once (rating.before(group) is -inf), lowest key
 * first; until then a switch on a few rounds' evidence flushes nothing.
 *
 * When an adaptive rating switches half-life it calls the policy back from inside access(); the policy then
 * calls rekey() here, which is safe at that point: no table is being changed across an access. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>
#include "../_kernel.h"
#include "../_adaptive_api.h"
#include <stdint.h>

/* htda.simulator.trace.NO_GROUP: a request without a group is its own group, -2 - its file id */
#define NO_GROUP (-1)
/* htda.coordinator.rating.GIB: the unit of normalised_key */
#define GIB 1073741824.0
/* the layouts an adaptive rating may ask for, and the share of the cache a probation queue fills */
enum { PLAIN = HTDA_PLAIN, ASKING = HTDA_ASKING, PROBATION = HTDA_PROBATION, LIRS = HTDA_LIRS };
#define PROBATION_SHARE HTDA_PROBATION_SHARE
/* where a cached file is (MAIN also: not cached); WINDOW: with a TinyLFU filter, in the window's heap */
enum { MAIN = 0, QUEUED = 1, READ_AGAIN = 2, WINDOW = 3 };

static PyObject *unit_weight; /* 1.0: the weight of an access */
static PyObject *str_key; /* "key" */
static PyObject *str_layout; /* "layout" */
static PyObject *str_before; /* "before" */
static PyObject *str_settled; /* "settled" */
static PyObject *str_sampled; /* "sampled" */
static PyObject *str_sample_size; /* "sample_size" */
static PyObject *str_samples; /* "samples" */

/* -- open-addressing tables by 64-bit id ----------------------------------------------------------------------- */

/* The head of every record of a table: what a probe reads, and in what would be padding the record's flag and
 * where an adaptive kernel keeps its group's keys (its slot, NO_SLOT when unknown: the kernel's slots are 32-bit
 * places too, HTDA_MOST_PLACES at most). */
typedef struct {
    int64_t id;
    uint32_t slot; /* a group: the kernel's hint, kept up to date by it; a file: its group's, as the group said */
    uint16_t where; /* a file: MAIN, QUEUED, READ_AGAIN (queued and read since) or WINDOW; a group: unused */
    uint16_t flag; /* a file: cached; a group: accessed */
} Head;

#define NO_SLOT UINT32_MAX

/* the record's kernel slot as the kernel's API takes it (-1: unknown) */
static inline Py_ssize_t
slot_of(const Head *head)
{
    return head->slot == NO_SLOT ? -1 : (Py_ssize_t)head->slot;
}

static inline void
set_slot(Head *head, Py_ssize_t slot)
{
    head->slot = slot < 0 || slot >= (Py_ssize_t)NO_SLOT ? NO_SLOT : (uint32_t)slot;
}

typedef struct {
    Head head; /* flag: cached */
    PyObject *group; /* the group it was first requested in (its group's object: a group has one) */
    PyObject *groups; /* NULL, or the set of all its groups' objects once it was requested in another */
    int64_t size; /* while cached: its size */
    double key; /* while cached: the key of its one live heap entry */
    uint64_t ghost; /* the stamp of its entry in the ghost list, 0 when it is not there (its size is `size` then:
                     * a file in the ghost list is not cached, and only staging it changes its size) */
} File;

typedef struct {
    Head head; /* flag: accessed */
    PyObject *group; /* the object the rating gets for this group, always the same one */
    long long nbytes; /* its size for the rating: bytes of the files first requested in it */
    double last; /* time of its last recorded access, if accessed */
} Group;

/* (a file record is 56 bytes and a group's 40: a trace of millions of objects holds one of each an object) */
_Static_assert(sizeof(File) == 56 && sizeof(Group) == 40, "the records grew");

#define CACHED(file) ((file)->head.flag)
#define WHERE(file) ((file)->head.where)
#define ACCESSED(group) ((group)->head.flag)

/* Records of one size, dense in order of addition and never deleted, found through an index of tagged slots
 * (HtdaTagSlot): a power-of-two array at most half full, probed linearly.  A slot holds 32 bits of the id's hash
 * and the record's place, not the id: a probe whose tag matches reads the record's id to be sure, and that record
 * is the one the caller reads next anyway.  So the index costs 8 bytes a slot where a record is 40-56 (a trace of
 * 4.2 million objects reserves 16.8 million slots a table: 134 MB, where slots of the id itself took 268), and
 * growing it moves no record. */
typedef HtdaTagSlot Slot;

/* most records a table holds */
#define MOST_RECORDS HTDA_MOST_PLACES

typedef struct {
    Slot *index;
    char *records;
    size_t stride;
    Py_ssize_t mask, count, room; /* the index's slots - 1; records held, and room for */
} Table;

#define RECORD(table, i) ((Head *)((table)->records + (size_t)(i) * (table)->stride))

static inline uint64_t
hash_of(int64_t id)
{
    return (uint64_t)id * 0x9E3779B97F4A7C15ULL;
}

/* the first slot from index i on (i moves to it) that is empty or has tag */
static inline const Slot *
tagged_from(const Table *table, uint32_t tag, Py_ssize_t *i)
{
    for (;; *i = (*i + 1) & table->mask) {
        const Slot *slot = &table->index[*i];
        if (!slot->at || slot->tag == tag)
            return slot;
    }
}

/* the record of id, or NULL */
static inline Head *
find(const Table *table, int64_t id)
{
    uint64_t hash = hash_of(id);
    uint32_t tag = htda_tag(hash);
    for (Py_ssize_t i = htda_home(table->mask, hash);; i = (i + 1) & table->mask) {
        const Slot *slot = tagged_from(table, tag, &i);
        if (!slot->at)
            return NULL;
        Head *head = RECORD(table, slot->at - 1);
        if (head->id == id)
            return head;
    }
}

/* Ask the cache for what find(table, id) will read, some requests ahead: the index slots first, then, once they are
 * in, the record they name.  A replay's look-ups are cache misses that depend on nothing before them, so they can
 * overlap with the requests between (on web07 the index's misses were two thirds of the loop's own time). */
static inline void
prefetch_index(const Table *table, int64_t id)
{
    __builtin_prefetch(&table->index[htda_home(table->mask, hash_of(id))]);
}

static inline void
prefetch_record(const Table *table, int64_t id)
{
    uint64_t hash = hash_of(id);
    Py_ssize_t i = htda_home(table->mask, hash);
    const Slot *slot = tagged_from(table, htda_tag(hash), &i);
    if (slot->at) /* (most likely id's: find checks) */
        __builtin_prefetch(RECORD(table, slot->at - 1));
}

/* an empty table with room for `reserve` records before it grows (at least 512) */
static int
table_init(Table *table, size_t stride, long long reserve)
{
    Py_ssize_t slots = 1024;
    while (slots < 2 * reserve && slots < ((Py_ssize_t)1 << 40))
        slots *= 2;
    table->stride = stride;
    table->mask = slots - 1;
    table->count = 0;
    table->room = Py_MIN(slots / 2, MOST_RECORDS);
    table->index = PyMem_Calloc((size_t)slots, sizeof(Slot));
    table->records = PyMem_Malloc((size_t)table->room * stride);
    if (table->index == NULL || table->records == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    htda_prefault(table->index, (size_t)slots * sizeof(Slot));
    return 0;
}

/* twice the index's slots (and room for as many more records), rebuilt from the records in order; pointers to
 * records are stale after it */
static int
grow(Table *table)
{
    if (table->room >= MOST_RECORDS) {
        PyErr_Format(PyExc_MemoryError, "a table of the simulator's cache holds at most %zd records",
                     MOST_RECORDS);
        return -1;
    }
    Py_ssize_t mask = table->mask * 2 + 1, room = Py_MIN(table->room * 2, MOST_RECORDS);
    Slot *index = PyMem_Calloc((size_t)mask + 1, sizeof(Slot));
    if (index == NULL || htda_grow((void **)&table->records, room, table->stride) < 0) {
        PyMem_Free(index);
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        return -1;
    }
    table->room = room;
    htda_prefault(index, ((size_t)mask + 1) * sizeof(Slot));
    for (Py_ssize_t r = 0; r < table->count; r++) {
        uint64_t hash = hash_of(RECORD(table, r)->id);
        *htda_empty_slot(index, mask, hash) = (Slot){htda_tag(hash), (uint32_t)(r + 1)};
    }
    PyMem_Free(table->index);
    table->index = index;
    table->mask = mask;
    return 0;
}

/* a new zeroed record for id (not in the table), or NULL on error; pointers to other records may be stale */
static Head *
add(Table *table, int64_t id)
{
    if (table->count == table->room && grow(table) < 0)
        return NULL;
    uint64_t hash = hash_of(id);
    *htda_empty_slot(table->index, table->mask, hash) = (Slot){htda_tag(hash), (uint32_t)(table->count + 1)};
    Head *head = RECORD(table, table->count);
    memset(head, 0, table->stride);
    head->id = id;
    table->count++;
    return head;
}

/* -- the eviction heap ------------------------------------------------------------------------------------------- */

typedef struct {
    double key;
    int64_t id;
} Entry;

typedef struct {
    Entry *entries;
    Py_ssize_t n, cap;
} Heap;

/* (key, id) a < b as Python compares (float, int) tuples */
static inline int
entry_lt(const Entry *a, const Entry *b)
{
    return a->key < b->key || (a->key == b->key && a->id < b->id);
}

#define ENTRY_LT(unused, a, b) entry_lt(a, b)
HTDA_HEAP(heap, Entry, void, ENTRY_LT)

static int
heap_push(Heap *heap, double key, int64_t id)
{
    if (heap->n == heap->cap) {
        Py_ssize_t cap = heap->cap ? 2 * heap->cap : 1024;
        if (htda_grow((void **)&heap->entries, cap, sizeof(Entry)) < 0)
            return -1;
        heap->cap = cap;
    }
    heap->entries[heap->n] = (Entry){key, id};
    heap_sift_up(NULL, heap->entries, heap->n++);
    return 0;
}

/* -- the probation queue and the ghost list: FIFOs of (id, size, stamp) in rings ------------------------------------ */

typedef struct {
    int64_t id;
    long long size;
    union {
        uint64_t stamp; /* the ghost list's: its order */
        double since; /* the queue's: when the file was queued (its group's last access then) */
    };
} Queued;

HTDA_RING(fifo, Queued)
typedef fifo_ring Ring;

/* the least entry, removed (the heap is not empty) */
static Entry
heap_pop(Heap *heap)
{
    Entry top = heap->entries[0];
    heap->entries[0] = heap->entries[--heap->n];
    if (heap->n)
        heap_sift_down(NULL, heap->entries, heap->n, 0);
    return top;
}

/* -- the TinyLFU filter's sketch ---------------------------------------------------------------------------------- */

/* The counts of htda.coordinator.admission.FrequencySketch, kept in its own tables (its tables(): a bytearray of
 * four rows of counters and one of the doorkeeper's bits, a byte each) and counted here as its increment() and
 * estimate() count: the same mixes of the key's hash, the same columns, the same halving.  The Python object
 * stays the owner; a replay holds its tables and its count of samples, and hands the count back at the end. */
typedef struct {
    PyObject *sketch; /* the FrequencySketch (held while open) */
    Py_buffer counters, door; /* its tables, exported while open */
    uint64_t mask, door_mask; /* its width - 1; its doorkeeper's bytes - 1 */
    Py_ssize_t width;
    long long samples, sample_size; /* accesses since its last halving; accesses between halvings */
} Sketch;

#define SKETCH_MIX1 0x9E3779B97F4A7C15ULL
#define SKETCH_MIX2 0xBF58476D1CE4E5B9ULL
#define SKETCH_MAX_COUNT 15

/* Python's hash() of the int id: its magnitude modulo 2**61 - 1 with its sign, -1 made -2 (the sketch mixes the
 * group's hash, as the coordinator's sketch does for any key) */
static inline int64_t
python_hash(int64_t id)
{
    uint64_t magnitude = id < 0 ? (uint64_t)0 - (uint64_t)id : (uint64_t)id;
    int64_t h = (int64_t)(magnitude % ((1ULL << 61) - 1));
    h = id < 0 ? -h : h;
    return h == -1 ? -2 : h;
}

/* admission._mixed: the two mixes that place the key in the sketch */
static inline void
sketch_mixes(int64_t id, uint64_t *h, uint64_t *g)
{
    uint64_t x = (uint64_t)python_hash(id) * SKETCH_MIX1;
    x ^= x >> 31;
    *h = x;
    *g = x * SKETCH_MIX2;
}

/* FrequencySketch.halve: every counter halves, the doorkeeper forgets */
static void
sketch_halve(Sketch *sketch)
{
    uint8_t *counters = sketch->counters.buf;
    for (Py_ssize_t i = 0; i < sketch->counters.len; i++)
        counters[i] >>= 1;
    memset(sketch->door.buf, 0, (size_t)sketch->door.len);
    sketch->samples = 0;
}

static inline void
sketch_bump(uint8_t *counter)
{
    if (*counter < SKETCH_MAX_COUNT)
        ++*counter;
}

/* where id counts in the sketch: its counter in each of the four rows, and its two doorkeeper bits */
typedef struct {
    uint64_t counter[4], door[2];
} SketchPlace;

static inline SketchPlace
sketch_place(const Sketch *sketch, int64_t id)
{
    uint64_t h, g, mask = sketch->mask, w = (uint64_t)sketch->width;
    sketch_mixes(id, &h, &g);
    return (SketchPlace){{h & mask, w + ((h >> 32) & mask), 2 * w + (g & mask), 3 * w + ((g >> 32) & mask)},
                         {(h >> 16) & sketch->door_mask, (g >> 8) & sketch->door_mask}};
}

/* FrequencySketch.increment(id) */
static void
sketch_count(Sketch *sketch, int64_t id)
{
    SketchPlace at = sketch_place(sketch, id);
    uint8_t *door = sketch->door.buf, *counters = sketch->counters.buf;
    if (!(door[at.door[0]] && door[at.door[1]]))
        door[at.door[0]] = door[at.door[1]] = 1; /* the first access, as far as the doorkeeper knows */
    else
        for (int row = 0; row < 4; row++)
            sketch_bump(&counters[at.counter[row]]);
    if (++sketch->samples >= sketch->sample_size)
        sketch_halve(sketch);
}

/* FrequencySketch.estimate(id) */
static int
sketch_estimate(const Sketch *sketch, int64_t id)
{
    SketchPlace at = sketch_place(sketch, id);
    const uint8_t *door = sketch->door.buf, *counters = sketch->counters.buf;
    int count = counters[at.counter[0]];
    for (int row = 1; row < 4; row++)
        count = Py_MIN(count, counters[at.counter[row]]);
    return count + (door[at.door[0]] && door[at.door[1]]);
}

static int
as_int(PyObject *value, long long *out)
{
    *out = PyLong_AsLongLong(value);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* a long long attribute of obj */
static int
int_attribute(PyObject *obj, PyObject *name, long long *out)
{
    PyObject *value = PyObject_GetAttr(obj, name);
    int failed = value == NULL || as_int(value, out) < 0;
    Py_XDECREF(value);
    return failed ? -1 : 0;
}

/* Hold the admission's sketch's tables and count (admission.sketch). */
static int
sketch_open(Sketch *sketch, PyObject *admission)
{
    PyObject *tables = NULL;
    if ((sketch->sketch = PyObject_GetAttrString(admission, "sketch")) == NULL
        || (tables = PyObject_CallMethod(sketch->sketch, "tables", NULL)) == NULL)
        goto failed;
    PyObject *counters, *door;
    if (!PyArg_ParseTuple(tables, "OO:tables", &counters, &door))
        goto failed;
    if (PyObject_GetBuffer(counters, &sketch->counters, PyBUF_WRITABLE) < 0)
        goto failed;
    if (PyObject_GetBuffer(door, &sketch->door, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&sketch->counters);
        goto failed;
    }
    Py_CLEAR(tables);
    sketch->width = sketch->counters.len / 4;
    sketch->mask = (uint64_t)sketch->width - 1;
    sketch->door_mask = (uint64_t)sketch->door.len - 1;
    int powers = sketch->width >= 1 && (sketch->mask & (uint64_t)sketch->width) == 0 && sketch->door.len >= 1
                 && (sketch->door_mask & (uint64_t)sketch->door.len) == 0 && sketch->counters.len == 4 * sketch->width;
    if (!powers)
        PyErr_SetString(PyExc_ValueError, "a sketch's tables are four rows and a doorkeeper of powers of two");
    if (!powers || int_attribute(sketch->sketch, str_samples, &sketch->samples) < 0
        || int_attribute(sketch->sketch, str_sample_size, &sketch->sample_size) < 0) {
        PyBuffer_Release(&sketch->counters);
        PyBuffer_Release(&sketch->door);
        goto failed;
    }
    return 0;
failed:
    Py_XDECREF(tables);
    Py_CLEAR(sketch->sketch);
    return -1;
}

/* Hand the count back and let the tables go (the sketch may replace them then: ensure_width). */
static int
sketch_close(Sketch *sketch)
{
    if (sketch->sketch == NULL)
        return 0;
    PyBuffer_Release(&sketch->counters);
    PyBuffer_Release(&sketch->door);
    PyObject *samples = PyLong_FromLongLong(sketch->samples);
    int failed = samples == NULL || PyObject_SetAttr(sketch->sketch, str_samples, samples) < 0;
    Py_XDECREF(samples);
    Py_CLEAR(sketch->sketch);
    return failed ? -1 : 0;
}

/* -- the cache ----------------------------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    Table files, groups;
    Heap heap;
    PyObject *rating; /* the RatingPolicy: access(), keys(), key() */
    int64_t capacity;
    int per_job; /* one access per group and timestamp (accesses="job"), else one per request */
    int per_size; /* keys per byte (normalised_key); else a file of one group has its group's key */
    int sized; /* the rating gets each group's bytes (an adaptive rating sizes its shadow caches by them) */
    int busy; /* in replay(): another replay would change the tables under it */
    int has_layout; /* the rating has a `layout` attribute (an adaptive one): read it on every miss */
    int has_settled; /* and a `settled` attribute: read it on every miss on probation until it is true */
    int settled; /* on probation since the rating settled: the files read once that the heap held were queued */
    int queue_layout; /* the layout the queue is kept for (PROBATION or LIRS) */
    Ring queue, ghost; /* the probation queue and the ghost list */
    long long queued, ghosted; /* their bytes */
    uint64_t stamps; /* ghost entries stamped so far */
    PyObject *keys; /* during replay() and rekey(): rating.keys(), the group -> key dict, updated in place; NULL
                     * with the adaptive kernel, whose keys are read from its table (it need not keep the dict) */
    const HtdaAdaptiveAPI *kernel; /* the rating's C functions if it is the adaptive kernel (its _c_api()), or NULL */
    /* with a TinyLFU filter: W-TinyLFU's layout (see admit_from_window) */
    PyObject *admission; /* the TinyLFUAdmission, or NULL */
    Sketch sketch; /* its counts, open during replay() */
    Heap window; /* the window's files (WHERE WINDOW), as the heap holds the main part's */
    long long window_used, cached; /* the window's bytes; the files cached (in every layout) */
    double window_cap; /* the window's share of the capacity, in bytes */
    long long sample, sampled, sample_hit_bytes, sample_bytes; /* the window's hill climbing: requests a sample,
                                                                 * and this sample's requests and bytes so far */
} Loop;

/* What one replay call adds up (the policy keeps the running totals). */
typedef struct {
    long long hits, hit_bytes, staged, evicted, used;
} Totals;

static int
add_checked(long long *total, long long amount)
{
    if (__builtin_add_overflow(*total, amount, total)) {
        PyErr_SetString(PyExc_OverflowError, "a replay's byte count overflowed 64 bits");
        return -1;
    }
    return 0;
}

static int
as_double(PyObject *key, double *out)
{
    if (!PyFloat_Check(key)) {
        PyErr_Format(PyExc_TypeError, "a rating's keys must be floats, not %.100s", Py_TYPE(key)->tp_name);
        return -1;
    }
    *out = PyFloat_AS_DOUBLE(key);
    return 0;
}

/* rating.<method>(group), a float: key (as file_key reads the groups of a file of several) or before */
static int
rating_of_group(Loop *self, PyObject *method, PyObject *group, double *out)
{
    PyObject *key = PyObject_CallMethodOneArg(self->rating, method, group);
    if (key == NULL)
        return -1;
    int failed = as_double(key, out);
    Py_DECREF(key);
    return failed;
}

static inline int
rated_key(Loop *self, PyObject *group, double *out)
{
    return rating_of_group(self, str_key, group, out);
}

/* keys[group] (KeyError if it has none); rating.key(group) with the adaptive kernel, which has no keys dict to
 * read (a group it does not know: -inf) */
static int
group_key(Loop *self, PyObject *group, double *out)
{
    if (self->keys == NULL)
        return rated_key(self, group, out);
    PyObject *key = PyDict_GetItemWithError(self->keys, group);
    if (key == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, group);
        return -1;
    }
    return as_double(key, out);
}

/* HTDAPolicy.file_key: the best of the file's groups' keys, per GiB of its size if per_size (a file not cached
 * has no size there: its key is not normalised) */
static int
file_key(Loop *self, const File *file, double *out)
{
    if (file->groups == NULL) {
        if (rated_key(self, file->group, out) < 0)
            return -1;
    }
    else { /* best_key: max(keys, default=NEVER), in the set's order */
        PyObject *groups = PyObject_GetIter(file->groups), *group;
        if (groups == NULL)
            return -1;
        double best = -INFINITY, key;
        int first = 1, failed = 0;
        while (!failed && (group = PyIter_Next(groups)) != NULL) {
            failed = rated_key(self, group, &key) < 0;
            if (!failed && (first || key > best))
                best = key;
            first = 0;
            Py_DECREF(group);
        }
        Py_DECREF(groups);
        if (failed || PyErr_Occurred())
            return -1;
        *out = best;
    }
    if (self->per_size && *out != -INFINITY && CACHED(file) && file->size) /* normalised_key */
        *out = *out - log2((double)file->size / GIB);
    return 0;
}

/* keys()[file's group], from the adaptive kernel's table where it keeps that group */
static int
own_key(Loop *self, const File *file, double *out)
{
    if (self->kernel != NULL && self->kernel->key(self->rating, file->group, slot_of(&file->head), out))
        return 0;
    return group_key(self, file->group, out);
}

/* the file's current key: its group's from keys(), when that is its key (the Python loop's fast path) */
static int
current_key(Loop *self, const File *file, double *out)
{
    if (!self->per_size && file->groups == NULL)
        return own_key(self, file, out);
    return file_key(self, file, out);
}

/* -- the steps of a request ------------------------------------------------------------------------------------- */

/* The request's group record, added the first time (its object made then, kept for every later access). */
static Group *
group_of_request(Loop *self, int64_t gid)
{
    Group *group = (Group *)find(&self->groups, gid);
    if (group != NULL)
        return group;
    PyObject *object = PyLong_FromLongLong(gid);
    if (object == NULL || (group = (Group *)add(&self->groups, gid)) == NULL) {
        Py_XDECREF(object);
        return NULL;
    }
    group->group = object;
    group->head.slot = NO_SLOT;
    return group;
}

/* The file's record, added (with its group as its first, growing the group's bytes) if it is new; a known file
 * requested in another group now has that group too. */
static File *
note_file(Loop *self, int64_t id, Group *group, long long size)
{
    File *file = (File *)find(&self->files, id);
    if (file == NULL) {
        if ((file = (File *)add(&self->files, id)) == NULL)
            return NULL;
        file->group = Py_NewRef(group->group);
        file->head.slot = NO_SLOT;
        return self->sized && add_checked(&group->nbytes, size) < 0 ? NULL : file;
    }
    if (file->group == group->group)
        return file;
    if (file->groups == NULL) { /* more_groups.setdefault(file, {known}) */
        if ((file->groups = PySet_New(NULL)) == NULL || PySet_Add(file->groups, file->group) < 0)
            return NULL;
    }
    return PySet_Add(file->groups, group->group) < 0 ? NULL : file;
}

/* Record the access of group at t with the rating, unless (one access per job) it was already accessed at t. */
static int
record_access(Loop *self, PyObject *access, Group *group, double t)
{
    if (self->per_job && ACCESSED(group) && group->last == t)
        return 0;
    group->last = t;
    ACCESSED(group) = 1;
    if (self->admission != NULL) /* the sketch counts every access the rating gets */
        sketch_count(&self->sketch, group->head.id);
    if (self->kernel != NULL) { /* the same access, without a call through Python */
        Py_ssize_t slot = slot_of(&group->head);
        int failed = self->kernel->access(self->rating, group->group, &slot, t,
                                          self->sized ? (double)group->nbytes : 1.0);
        set_slot(&group->head, slot);
        return failed;
    }
    PyObject *t_object = PyFloat_FromDouble(t);
    PyObject *bytes = self->sized ? PyLong_FromLongLong(group->nbytes) : NULL; /* (0 for a group of no first file) */
    PyObject *done = NULL;
    if (t_object != NULL && (bytes != NULL || !self->sized)) {
        PyObject *args[4] = {group->group, t_object, unit_weight, bytes};
        done = PyObject_Vectorcall(access, args, self->sized ? 4 : 2, NULL);
    }
    Py_XDECREF(t_object);
    Py_XDECREF(bytes);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
}

/* The lowest entry of heap (the main heap or the window, not empty) made current: while the lowest went stale (its
 * group was accessed since it was pushed), it is pushed again with its current key.  Its file, or NULL on error (no
 * entry is lost). */
static File *
current_top(Loop *self, Heap *heap)
{
    for (;;) {
        Entry top = heap->entries[0];
        File *file = (File *)find(&self->files, top.id);
        double current;
        if (current_key(self, file, &current) < 0)
            return NULL;
        if (current == top.key)
            return file;
        heap_pop(heap);
        file->key = current;
        if (heap_push(heap, current, top.id) < 0)
            return NULL;
    }
}

/* The file enters the cache, `size` bytes. */
static void
cache_file(Loop *self, Totals *totals, File *file, long long size)
{
    CACHED(file) = 1;
    file->size = size;
    self->cached++;
    totals->used += size;
}

/* The file leaves the cache (its place MAIN again, as for a file not cached).  Its bytes count as evicted, unless
 * it is the file just staged (staged_id, when staged is not NULL), which was not admitted: *staged becomes 0. */
static int
uncache(Loop *self, Totals *totals, File *file, int64_t staged_id, long long *staged)
{
    CACHED(file) = 0;
    WHERE(file) = MAIN;
    self->cached--;
    totals->used -= file->size;
    if (staged != NULL && file->head.id == staged_id) {
        *staged = 0; /* not admitted: nothing staged, nothing evicted */
        return 0;
    }
    return add_checked(&totals->evicted, file->size);
}

/* The file of the heap's lowest entry goes (the heap is not empty), once the entries above it that went stale were
 * pushed again with their current keys.  If it is the file just staged (id staged_id), it was not admitted:
 * *staged becomes 0.  `asking`: it stays if it is of another group and its key is at least `before`.  1 when one
 * went, 0 when it stayed, -1 on error. */
static int
evict_lowest(Loop *self, Totals *totals, int64_t staged_id, long long *staged, const Group *asking, double before)
{
    File *victim = current_top(self, &self->heap);
    if (victim == NULL)
        return -1;
    Entry top = self->heap.entries[0];
    if (asking != NULL && victim->group != asking->group && before <= top.key)
        return 0;
    heap_pop(&self->heap);
    return uncache(self, totals, victim, staged_id, staged) < 0 ? -1 : 1;
}

/* Evict lowest keys first until `extra` more bytes fit; a stale entry is pushed again with its current key.  If
 * the victim is the file just staged (id staged_id), it was not admitted: *staged becomes 0.  `asking` (the
 * group of a missed file whose key before this access was `before`): the admission question, which stops at the
 * first victim of another group whose key is at least `before` (the victims that went before it stay gone, as
 * in TinyLFU).  1 when it fits, 0 when stopped, -1 on error. */
static int
make_room(Loop *self, Totals *totals, long long extra, int64_t staged_id, long long *staged, const Group *asking,
          double before)
{
    while (totals->used + extra > self->capacity) {
        if (self->heap.n == 0) { /* every cached file has an entry: bytes held, so some entry */
            PyErr_SetString(PyExc_RuntimeError, "HTDAPolicy's cache holds bytes but no file");
            return -1;
        }
        int evicted = evict_lowest(self, totals, staged_id, staged, asking, before);
        if (evicted <= 0)
            return evicted;
    }
    return 1;
}

/* the layout the rating asks for now (PLAIN when it has no say), -1 on error */
static int
rating_layout(Loop *self)
{
    if (self->kernel != NULL)
        return self->kernel->layout(self->rating);
    if (!self->has_layout)
        return PLAIN;
    PyObject *value = PyObject_GetAttr(self->rating, str_layout);
    if (value == NULL)
        return -1;
    long layout = PyLong_AsLong(value);
    Py_DECREF(value);
    if (layout == -1 && PyErr_Occurred())
        return -1;
    return layout == ASKING || layout == PROBATION || layout == LIRS ? (int)layout : PLAIN;
}

/* the key of a file leaving the queue for the heap, and its entry there */
static int
to_heap(Loop *self, File *file)
{
    WHERE(file) = MAIN;
    if (current_key(self, file, &file->key) < 0)
        return -1;
    return heap_push(&self->heap, file->key, file->head.id);
}

/* The ghost list's oldest entries go while it holds more than `keep` bytes (an entry whose file came back since
 * is already gone: its bytes were taken off then). */
static void
trim_ghost(Loop *self, double keep)
{
    while ((double)self->ghosted > keep && self->ghost.n) {
        Queued old = fifo_pop(&self->ghost);
        File *was = (File *)find(&self->files, old.id);
        if (was->ghost == old.stamp) {
            was->ghost = 0;
            self->ghosted -= old.size;
        }
    }
}

/* whether a LIRS queue's entry is its file's live one (not one it left, or was queued again after) */
static inline int
lirs_live(const File *file, const Queued *entry)
{
    return file->ghost == entry->stamp && CACHED(file);
}

/* The rating lays the cache out otherwise now: the queued files join the heap, in the queue's order (a LIRS
 * queue's live entries only), and the ghost list is forgotten. */
static int
end_probation(Loop *self)
{
    while (self->queue.n) {
        Queued entry = fifo_pop(&self->queue);
        File *file = (File *)find(&self->files, entry.id);
        if (self->queue_layout == LIRS) {
            if (!lirs_live(file, &entry))
                continue;
            file->ghost = 0;
        }
        if (to_heap(self, file) < 0)
            return -1;
    }
    self->queued = 0;
    trim_ghost(self, -1.0); /* (every entry: the bytes it holds are never negative) */
    return 0;
}

/* whether the rating has settled on probation (see the top of the file); -1 on error */
static int
rating_settled(Loop *self)
{
    if (self->kernel != NULL)
        return self->kernel->settled(self->rating);
    if (!self->has_settled)
        return 0;
    PyObject *value = PyObject_GetAttr(self->rating, str_settled);
    if (value == NULL)
        return -1;
    int settled = PyObject_IsTrue(value);
    Py_DECREF(value);
    return settled;
}

/* rating.before(group): the group's key before its latest access (-inf if it has one access) */
static inline int
rating_before(Loop *self, PyObject *group, double *out)
{
    return rating_of_group(self, str_before, group, out);
}

/* whether the group `group` was read only once: its key before its latest access is -inf; -1 on error */
static int
read_once(Loop *self, PyObject *group)
{
    double before;
    return rating_before(self, group, &before) < 0 ? -1 : before == -INFINITY;
}

/* The rating settled on probation: every file of the heap whose group (its first) was read only once joins the
 * queue, lowest key first, behind the files queued since the probation began; the others stay in the heap. */
static int
settle(Loop *self, double now)
{
    Entry *kept = PyMem_Malloc(sizeof(Entry) * ((size_t)self->heap.n + 1));
    if (kept == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t nkept = 0;
    int failed = 0;
    while (self->heap.n && !failed) {
        File *file = current_top(self, &self->heap);
        if (file == NULL) {
            failed = 1;
            break;
        }
        Entry top = heap_pop(&self->heap);
        int once;
        if ((once = read_once(self, file->group)) < 0)
            failed = 1;
        else if (once && fifo_push(&self->queue, (Queued){top.id, file->size, {.since = now}}) < 0)
            failed = 1;
        else if (once) {
            WHERE(file) = QUEUED;
            self->queued += file->size;
            continue;
        }
        kept[nkept++] = top; /* read again, or on an error: it keeps its entry */
    }
    for (Py_ssize_t i = 0; i < nkept; i++) /* (room enough: the heap held these entries) */
        heap_push(&self->heap, kept[i].key, kept[i].id);
    PyMem_Free(kept);
    return failed ? -1 : 0;
}

/* Whether a queued file was read again since it was queued (at `since`): the file itself, or its group (its first)
 * by a later job.  The shadows replay groups, so for them a dataset read again by the next job is read again
 * whichever of its files that job read; the cache asks the same of its files, or it would judge a layout by one
 * unit and run it by another.  (A file without a group is its own: read again only if it was.  A later job is a
 * later time, also with one access a request.)  1, 0, or -1. */
static int
read_again(Loop *self, const File *file, double since)
{
    if (WHERE(file) == READ_AGAIN)
        return 1;
    long long gid = PyLong_AsLongLong(file->group);
    if (gid == -1 && PyErr_Occurred())
        return -1;
    int64_t own;
    if (!__builtin_sub_overflow((int64_t)-2, file->head.id, &own) && gid == own)
        return 0; /* its own group: its own reads set READ_AGAIN */
    const Group *group = (const Group *)find(&self->groups, gid);
    return group != NULL && ACCESSED(group) && group->last > since;
}

/* The queue's oldest file leaves it: into the heap if it was read again while queued, else out of the cache and
 * into the ghost list (which keeps at most the rest of the capacity).  The file just staged (staged_id) leaving
 * unread was not admitted. */
static int
dequeue(Loop *self, Totals *totals, int64_t staged_id, long long *staged)
{
    Queued oldest = fifo_pop(&self->queue);
    File *file = (File *)find(&self->files, oldest.id);
    self->queued -= file->size;
    int again = read_again(self, file, oldest.since);
    if (again < 0) {
        to_heap(self, file); /* (it stays cached: an error loses no file) */
        return -1;
    }
    if (again)
        return to_heap(self, file);
    if (uncache(self, totals, file, staged_id, staged) < 0)
        return -1;
    Queued ghost = {oldest.id, file->size, {.stamp = ++self->stamps}};
    if (fifo_push(&self->ghost, ghost) < 0)
        return -1;
    file->ghost = ghost.stamp;
    self->ghosted += ghost.size;
    trim_ghost(self, (1.0 - PROBATION_SHARE) * (double)self->capacity);
    return 0;
}

/* The LIRS layout (as the kernel's LIRS shadows, _adaptive.c): the heap is the protected (LIR) set, at most
 * 1 - LIRS_SHARE of the capacity; the queue holds the other cached files (HIR) in a FIFO with lazy deletion
 * (file->ghost: the stamp of its live entry).  A file joins the heap while it has room, or when its group's key
 * before this access is above the heap's lowest (LIRS: read again while still in the stack), and the heap's lowest
 * then go to the queue's tail; room is made from the queue's head. */
#define LIRS_SHARE HTDA_LIRS_SHARE

static int
lirs_enqueue(Loop *self, File *file)
{
    Queued entry = {file->head.id, file->size, {.stamp = ++self->stamps}};
    if (fifo_push(&self->queue, entry) < 0)
        return -1;
    file->ghost = entry.stamp;
    WHERE(file) = QUEUED;
    self->queued += file->size;
    return 0;
}

static void
lirs_unqueue(Loop *self, File *file)
{
    file->ghost = 0;
    WHERE(file) = MAIN;
    self->queued -= file->size;
}

static int key_before(Loop *self, const Group *group, long long size, double *out); /* (with the question, below) */

/* whether the group's key before this access is above the heap's lowest current key: 1, 0, -1 */
static int
lirs_recent(Loop *self, const Group *group, long long size)
{
    if (!self->heap.n)
        return 0;
    double before;
    if (key_before(self, group, size, &before) < 0)
        return -1;
    if (before == -INFINITY)
        return 0;
    if (current_top(self, &self->heap) == NULL)
        return -1;
    return before > self->heap.entries[0].key;
}

/* the heap's lowest go to the queue's tail while the heap holds more than its share */
static int
lirs_demote(Loop *self, Totals *totals)
{
    while (self->heap.n > 1 && (double)(totals->used - self->queued) > (1.0 - LIRS_SHARE) * (double)self->capacity) {
        File *low = current_top(self, &self->heap);
        if (low == NULL)
            return -1;
        heap_pop(&self->heap);
        if (lirs_enqueue(self, low) < 0)
            return -1;
    }
    return 0;
}

/* a hit of a queued file: into the heap if it passes LIRS's test, else to the queue's tail */
static int
lirs_hit(Loop *self, Totals *totals, File *file, const Group *group, long long size)
{
    int recent = lirs_recent(self, group, size);
    if (recent < 0)
        return -1;
    lirs_unqueue(self, file);
    if (!recent)
        return lirs_enqueue(self, file);
    if (to_heap(self, file) < 0)
        return -1;
    return lirs_demote(self, totals);
}

/* A miss of a file that fits while the rating lays the cache out as LIRS: into the heap if it has room or the file
 * passes LIRS's test, else queued; then the queue's oldest leave (else the heap's lowest) until the cache fits. */
static int
lirs_stage(Loop *self, Totals *totals, File *file, const Group *group, long long size)
{
    int64_t id = file->head.id;
    int recent = (double)(totals->used - self->queued + size) <= (1.0 - LIRS_SHARE) * (double)self->capacity;
    if (!recent && (recent = lirs_recent(self, group, size)) < 0)
        return -1;
    cache_file(self, totals, file, size);
    if (recent) {
        if (to_heap(self, file) < 0 || lirs_demote(self, totals) < 0)
            return -1;
    }
    else if (lirs_enqueue(self, file) < 0)
        return -1;
    long long staged = size;
    while (totals->used > self->capacity) {
        if (self->queue.n) {
            Queued oldest = fifo_pop(&self->queue);
            File *was = (File *)find(&self->files, oldest.id);
            if (!lirs_live(was, &oldest))
                continue;
            lirs_unqueue(self, was);
            if (uncache(self, totals, was, id, &staged) < 0)
                return -1;
        }
        else if (self->heap.n) {
            if (evict_lowest(self, totals, id, &staged, NULL, 0.0) < 0)
                return -1;
        }
        else {
            PyErr_SetString(PyExc_RuntimeError, "HTDAPolicy's cache holds bytes but no file");
            return -1;
        }
    }
    return add_checked(&totals->staged, staged);
}

/* A miss of a file that fits while the rating puts new files on probation: back from the ghost list into the
 * heap, or into the queue; then the queue's oldest leave while it holds its share (or the heap is empty), else
 * the heap's lowest, until the cache fits. */
static int
stage_on_probation(Loop *self, Totals *totals, File *file, long long size, double now)
{
    int64_t id = file->head.id;
    int back = file->ghost != 0;
    if (back) {
        self->ghosted -= file->size; /* its size when it went, until the line below */
        file->ghost = 0;
    }
    cache_file(self, totals, file, size);
    if (back) {
        if (to_heap(self, file) < 0)
            return -1;
    }
    else {
        if (fifo_push(&self->queue, (Queued){id, size, {.since = now}}) < 0)
            return -1;
        WHERE(file) = QUEUED;
        self->queued += size;
    }
    long long staged = size;
    while (totals->used > self->capacity) {
        int failed;
        if (self->queue.n && ((double)self->queued >= PROBATION_SHARE * (double)self->capacity || !self->heap.n))
            failed = dequeue(self, totals, id, &staged) < 0;
        else if (self->heap.n)
            failed = evict_lowest(self, totals, id, &staged, NULL, 0.0) < 0;
        else {
            PyErr_SetString(PyExc_RuntimeError, "HTDAPolicy's cache holds bytes but no file");
            failed = 1;
        }
        if (failed)
            return -1;
    }
    return add_checked(&totals->staged, staged);
}

/* The key group had before this access (rating.before), per byte of size if per_size */
static int
key_before(Loop *self, const Group *group, long long size, double *out)
{
    if (rating_before(self, group->group, out) < 0)
        return -1;
    if (self->per_size && *out != -INFINITY && size)
        *out = *out - log2((double)size / GIB);
    return 0;
}

/* A miss of a file that fits: it is staged with its current key, then the lowest keys go until the cache fits
 * (it may be one of them); a file that would be the lowest entry, when something must go, is not admitted, nor
 * one that does not pass the admission question when the rating says to ask it.  (On probation, as LIRS:
 * above.)  A change between layouts with a queue empties it first. */
static int
stage(Loop *self, Totals *totals, File *file, const Group *group, long long size)
{
    int layout = rating_layout(self);
    int queues = layout == PROBATION || layout == LIRS;
    if (layout < 0 || ((!queues || layout != self->queue_layout) && (self->queue.n || self->ghost.n)
                       && end_probation(self) < 0))
        return -1;
    if (queues)
        self->queue_layout = layout;
    if (layout != PROBATION)
        self->settled = 0;
    else if (!self->settled) {
        int settled = rating_settled(self);
        if (settled < 0 || (settled && settle(self, group->last) < 0))
            return -1;
        self->settled = settled;
    }
    if (layout == LIRS)
        return lirs_stage(self, totals, file, group, size);
    if (layout == PROBATION)
        return stage_on_probation(self, totals, file, size, group->last);
    double key;
    int own = !self->per_size && file->group == group->group && file->groups == NULL;
    if ((own ? own_key(self, file, &key) : file_key(self, file, &key)) < 0)
        return -1;
    Entry entry = {key, file->head.id};
    if (totals->used + size > self->capacity) {
        if (self->heap.n && entry_lt(&entry, &self->heap.entries[0]))
            return 0; /* the loop below would evict it first and nothing else (used <= capacity here) */
        int asking = layout == ASKING;
        double before;
        if (asking && key_before(self, group, size, &before) < 0)
            return -1;
        long long none = 0; /* (the file is not in the heap yet: never a victim) */
        int room = asking ? make_room(self, totals, size, file->head.id, &none, group, before) : 1;
        if (room <= 0)
            return room;
    }
    cache_file(self, totals, file, size);
    file->key = key;
    if (heap_push(&self->heap, key, entry.id) < 0)
        return -1;
    long long staged = size;
    if (make_room(self, totals, 0, entry.id, &staged, NULL, 0.0) < 0)
        return -1;
    return add_checked(&totals->staged, staged);
}

/* -- with a TinyLFU filter: W-TinyLFU's layout, the rating's order inside each part -------------------------------
 *
 * New files enter a window (window_cap bytes, a share of the capacity that the admission's hill climbing moves);
 * while the window holds more, its lowest-keyed file is the candidate for the main part, which it enters only if
 * the sketch estimates its group more frequent than that of each main victim it needs, lowest key first (ties
 * keep the victim; a victim of its own group goes unasked); otherwise it leaves, and the victims that went before
 * it stay gone.  The rating's layout is not asked: the filter is the layout. */

/* the sketch's estimate for the file's group (its first) */
static int
group_frequency(Loop *self, const File *file, int *out)
{
    long long gid;
    if (as_int(file->group, &gid) < 0)
        return -1;
    *out = sketch_estimate(&self->sketch, gid);
    return 0;
}

/* The window's lowest files, while it holds more than its share, are candidates for the main part. */
static int
admit_from_window(Loop *self, Totals *totals)
{
    while ((double)self->window_used > self->window_cap && self->window.n) {
        File *candidate = current_top(self, &self->window);
        if (candidate == NULL)
            return -1;
        heap_pop(&self->window);
        self->window_used -= candidate->size;
        int admitted = 1, mine = -1, theirs; /* mine: the candidate's estimate, once it is needed */
        while (totals->used > self->capacity && self->heap.n) {
            File *victim = current_top(self, &self->heap);
            if (victim == NULL || (mine < 0 && group_frequency(self, candidate, &mine) < 0))
                return -1;
            if (victim->group != candidate->group) {
                if (group_frequency(self, victim, &theirs) < 0)
                    return -1;
                if (mine <= theirs) {
                    admitted = 0;
                    break;
                }
            }
            heap_pop(&self->heap);
            if (uncache(self, totals, victim, 0, NULL) < 0)
                return -1;
        }
        if (admitted && totals->used <= self->capacity) {
            WHERE(candidate) = MAIN;
            if (heap_push(&self->heap, candidate->key, candidate->head.id) < 0)
                return -1;
        }
        else if (uncache(self, totals, candidate, 0, NULL) < 0)
            return -1;
    }
    return 0;
}

/* A miss of a file that fits: into the window; then its candidates, and while the window grew into the main part's
 * bytes, the main part's lowest (the window's, when the main part is empty) go unasked. */
static int
stage_in_window(Loop *self, Totals *totals, File *file, long long size)
{
    cache_file(self, totals, file, size);
    WHERE(file) = WINDOW;
    if (current_key(self, file, &file->key) < 0 || heap_push(&self->window, file->key, file->head.id) < 0)
        return -1;
    self->window_used += size;
    if (add_checked(&totals->staged, size) < 0 || admit_from_window(self, totals) < 0)
        return -1;
    while (totals->used > self->capacity) {
        Heap *heap = self->heap.n ? &self->heap : &self->window;
        File *victim = current_top(self, heap);
        if (victim == NULL)
            return -1;
        heap_pop(heap);
        if (WHERE(victim) == WINDOW)
            self->window_used -= victim->size;
        if (uncache(self, totals, victim, 0, NULL) < 0)
            return -1;
    }
    return 0;
}

/* The window's share of the capacity is `share` (a new reference, or NULL on an error), and the admission's
 * sample_size the requests of the climb's next sample. */
static int
take_window(Loop *self, PyObject *share)
{
    double window = share == NULL ? -1.0 : PyFloat_AsDouble(share);
    Py_XDECREF(share);
    if (share == NULL || (window == -1.0 && PyErr_Occurred()))
        return -1;
    self->window_cap = window * (double)self->capacity;
    return int_attribute(self->admission, str_sample_size, &self->sample);
}

/* a sample of requests is over: the admission adapts the window's share to its byte hit ratio */
static int
climb(Loop *self)
{
    double ratio = self->sample_bytes ? (double)self->sample_hit_bytes / (double)self->sample_bytes : 0.0;
    PyObject *ratio_object = PyFloat_FromDouble(ratio), *share = NULL;
    if (ratio_object != NULL)
        share = PyObject_CallMethodOneArg(self->admission, str_sampled, ratio_object);
    Py_XDECREF(ratio_object);
    self->sampled = self->sample_hit_bytes = self->sample_bytes = 0;
    return take_window(self, share);
}

/* The sketch counts about as many groups as the cache holds files: past its width it grows (and starts afresh). */
static int
widen_sketch(Loop *self)
{
    if (self->cached <= self->sketch.width)
        return 0;
    if (sketch_close(&self->sketch) < 0)
        return -1;
    PyObject *done = PyObject_CallMethod(self->admission, "ensure_width", "L", self->cached);
    Py_XDECREF(done);
    if (done == NULL || sketch_open(&self->sketch, self->admission) < 0)
        return -1;
    return int_attribute(self->admission, str_sample_size, &self->sample);
}

/* A request past its bookkeeping, with a TinyLFU filter: a hit, or a miss that may stage it into the window. */
static int
admitted_request(Loop *self, Totals *totals, File *file, long long size)
{
    self->sampled++;
    if (add_checked(&self->sample_bytes, size) < 0 || (self->sampled >= self->sample && climb(self) < 0))
        return -1;
    if (CACHED(file)) {
        totals->hits++;
        self->sample_hit_bytes += size; /* (at most sample_bytes) */
        return add_checked(&totals->hit_bytes, size);
    }
    if (size > self->capacity)
        return 0;
    if (stage_in_window(self, totals, file, size) < 0)
        return -1;
    return widen_sketch(self);
}

/* The admission's state at the start of a replay: its sketch's tables and the window's share. */
static int
open_admission(Loop *self)
{
    if (take_window(self, PyObject_GetAttrString(self->admission, "window")) < 0)
        return -1;
    return sketch_open(&self->sketch, self->admission);
}

/* One request: its group's and file's bookkeeping and the access, then a hit, or a miss that may stage it. */
static int
request(Loop *self, PyObject *access, Totals *totals, double t, int64_t id, long long size, int64_t gid)
{
    Group *group = group_of_request(self, gid);
    File *file = group == NULL ? NULL : note_file(self, id, group, size);
    if (file == NULL || record_access(self, access, group, t) < 0)
        return -1;
    if (file->group == group->group)
        file->head.slot = group->head.slot;
    /* (the access may have re-keyed the cache; it added no record, so file and group still point to theirs) */
    if (self->admission != NULL)
        return admitted_request(self, totals, file, size);
    if (CACHED(file)) {
        if (WHERE(file) == QUEUED && self->queue_layout == LIRS) {
            if (lirs_hit(self, totals, file, group, size) < 0)
                return -1;
        }
        else if (WHERE(file) == QUEUED)
            WHERE(file) = READ_AGAIN;
        totals->hits++;
        return add_checked(&totals->hit_bytes, size);
    }
    return size > self->capacity ? 0 : stage(self, totals, file, group, size);
}

/* -- the methods ---------------------------------------------------------------------------------------------- */

/* the request's group id: its own (group), or (none) the file's own group, -2 - id */
static int
gid_of_request(int64_t group, int64_t id, int64_t *gid)
{
    *gid = group;
    if (group == NO_GROUP && __builtin_sub_overflow((int64_t)-2, id, gid)) {
        PyErr_SetString(PyExc_OverflowError, "a file id out of range");
        return -1;
    }
    return 0;
}

/* how many requests ahead the replay asks for the index slots, then the records, of a request's file and group */
#define PREFETCH_FAR 16
#define PREFETCH_NEAR 8

static inline void
prefetch_request(const Loop *self, int64_t id, int64_t group, int records)
{
    int64_t gid = group == NO_GROUP ? (int64_t)((uint64_t)-2 - (uint64_t)id) : group; /* (wraps: a hint only) */
    if (records) {
        prefetch_record(&self->files, id);
        prefetch_record(&self->groups, gid);
    }
    else {
        prefetch_index(&self->files, id);
        prefetch_index(&self->groups, gid);
    }
}

/* a column of a replay into *view: n items of 8 bytes in a row, doubles if `doubles` else signed ints (a numpy
 * float64 or int64 array); -1 with TypeError if it is not one */
static int
column(PyObject *array, Py_buffer *view, int doubles, Py_ssize_t n)
{
    if (PyObject_GetBuffer(array, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    const char *format = view->format == NULL ? "B" : view->format;
    if (format[0] == '<' || format[0] == '=' || format[0] == '@')
        format++;
    int kind_ok = doubles ? strcmp(format, "d") == 0 : strcmp(format, "q") == 0 || strcmp(format, "l") == 0;
    if (view->ndim != 1 || view->itemsize != 8 || !kind_ok || view->shape[0] != n) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_TypeError, "times (float64), ids, sizes, groups (int64): arrays of one length");
        return -1;
    }
    return 0;
}

/* self->keys = rating.keys(), except with the adaptive kernel: its keys are read from its table (own_key, group_key) */
static int
fetch_keys(Loop *self)
{
    if (self->kernel != NULL)
        return 0;
    self->keys = PyObject_CallMethod(self->rating, "keys", NULL);
    if (self->keys != NULL && !PyDict_Check(self->keys)) {
        PyErr_SetString(PyExc_TypeError, "the rating's keys() must be a dict");
        Py_CLEAR(self->keys);
    }
    return self->keys == NULL ? -1 : 0;
}

static int
start(Loop *self)
{
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "HTDAPolicy's replay was re-entered");
        return -1;
    }
    return fetch_keys(self);
}

PyDoc_STRVAR(replay_doc,
"replay(times, ids, sizes, groups, used, /)\n--\n\n"
"Serve the requests (contiguous arrays of one length: times float64, the rest int64) in order, ``used`` bytes\n"
"already cached; returns\n"
"``(hits, hit_bytes, staged, evicted, used)`` of these requests (used: the bytes cached after them).");

/* The requests of the replay's columns (held), once start() has fetched the keys; returns replay()'s tuple. */
static PyObject *
serve(Loop *self, Py_buffer *views, Py_ssize_t n, Totals *totals)
{
    const double *times = views[0].buf;
    const int64_t *ids = views[1].buf, *sizes = views[2].buf, *groups = views[3].buf;
    PyObject *access = PyObject_GetAttrString(self->rating, "access");
    int failed = access == NULL || (self->admission != NULL && open_admission(self) < 0);
    self->busy = 1;
    for (Py_ssize_t i = 0; i < n && !failed; i++) {
        int64_t gid;
        if (i + PREFETCH_FAR < n)
            prefetch_request(self, ids[i + PREFETCH_FAR], groups[i + PREFETCH_FAR], 0);
        if (i + PREFETCH_NEAR < n)
            prefetch_request(self, ids[i + PREFETCH_NEAR], groups[i + PREFETCH_NEAR], 1);
        failed = gid_of_request(groups[i], ids[i], &gid) < 0
                 || request(self, access, totals, times[i], ids[i], sizes[i], gid) < 0;
    }
    self->busy = 0;
    if (sketch_close(&self->sketch) < 0 && !failed) /* (kept: the error of the request that failed) */
        failed = 1;
    Py_XDECREF(access);
    Py_CLEAR(self->keys);
    if (failed)
        return NULL;
    return Py_BuildValue("(LLLLL)", totals->hits, totals->hit_bytes, totals->staged, totals->evicted, totals->used);
}

static PyObject *
Loop_replay(Loop *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "replay(times, ids, sizes, groups, used)");
        return NULL;
    }
    /* the arrays are read in place, not as lists of an object an item: their exports stay held (they cannot be
     * resized) across the accesses, which may run Python */
    Py_buffer views[4];
    Py_ssize_t n = PyObject_Length(args[0]);
    int held = 0;
    while (n >= 0 && held < 4 && column(args[held], &views[held], held == 0, n) == 0)
        held++;
    Totals totals = {0, 0, 0, 0, 0};
    PyObject *result = NULL;
    if (held == 4 && as_int(args[4], &totals.used) == 0 && start(self) == 0)
        result = serve(self, views, n, &totals);
    while (held > 0)
        PyBuffer_Release(&views[--held]);
    return result;
}

PyDoc_STRVAR(rekey_doc,
"rekey()\n--\n\nEvery key changed (an adaptive rating switched half-life): re-key the cached files, one heap entry\n"
"each.");

static PyObject *
Loop_rekey(Loop *self, PyObject *Py_UNUSED(ignored))
{
    int nested = self->busy; /* called back from inside replay(): its keys dict (if any) is the one */
    if (!nested && fetch_keys(self) < 0)
        return NULL;
    int failed = 0;
    self->heap.n = self->window.n = 0; /* room enough: every cached file had an entry in one of them */
    for (Py_ssize_t i = 0; i < self->files.count && !failed; i++) {
        File *file = (File *)RECORD(&self->files, i);
        Heap *heap = WHERE(file) == MAIN ? &self->heap : WHERE(file) == WINDOW ? &self->window : NULL;
        if (CACHED(file) && heap != NULL) { /* (queued files have no entry) */
            failed = current_key(self, file, &file->key) < 0;
            heap->entries[heap->n++] = (Entry){file->key, file->head.id};
        }
    }
    heap_heapify(NULL, self->heap.entries, self->heap.n);
    heap_heapify(NULL, self->window.entries, self->window.n);
    if (!nested)
        Py_CLEAR(self->keys);
    if (failed)
        return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(file_key_doc, "file_key(file)\n--\n\nThe file's current key (KeyError if it was never requested).");

static PyObject *
Loop_file_key(Loop *self, PyObject *arg)
{
    long long id;
    if (as_int(arg, &id) < 0)
        return NULL;
    File *file = (File *)find(&self->files, id);
    if (file == NULL) {
        PyErr_SetObject(PyExc_KeyError, arg);
        return NULL;
    }
    double key;
    if (file_key(self, file, &key) < 0)
        return NULL;
    return PyFloat_FromDouble(key);
}

PyDoc_STRVAR(contents_doc, "contents()\n--\n\nA new dict of the cached files and their sizes.");

static PyObject *
Loop_contents(Loop *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *held = PyDict_New();
    for (Py_ssize_t i = 0; held != NULL && i < self->files.count; i++) {
        File *file = (File *)RECORD(&self->files, i);
        if (!CACHED(file))
            continue;
        PyObject *id = PyLong_FromLongLong(file->head.id), *size = PyLong_FromLongLong(file->size);
        if (id == NULL || size == NULL || PyDict_SetItem(held, id, size) < 0)
            Py_CLEAR(held);
        Py_XDECREF(id);
        Py_XDECREF(size);
    }
    return held;
}

/* -- the type --------------------------------------------------------------------------------------------------- */

/* *api: the rating's C functions if it is the adaptive kernel and its access is the kernel's (_c_api()), else
 * NULL.  -1 with an exception if asking failed otherwise. */
static int
kernel_api(PyObject *rating, const HtdaAdaptiveAPI **api)
{
    *api = NULL;
    PyObject *capsule = PyObject_CallMethod(rating, "_c_api", NULL);
    if (capsule == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear(); /* not the adaptive kernel */
        return 0;
    }
    if (capsule != Py_None)
        *api = PyCapsule_GetPointer(capsule, HTDA_ADAPTIVE_API_NAME);
    Py_DECREF(capsule);
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *
Loop_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"rating", "capacity", "per_job", "per_size", "sized", "reserve", "admission", NULL};
    PyObject *rating, *admission;
    long long capacity, reserve;
    int per_job, per_size, sized;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$OLpppLO:Loop", names, &rating, &capacity, &per_job, &per_size,
                                     &sized, &reserve, &admission))
        return NULL;
    Loop *self = (Loop *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->rating = Py_NewRef(rating);
    self->admission = admission == Py_None ? NULL : Py_NewRef(admission);
    self->capacity = capacity;
    self->per_job = per_job;
    self->per_size = per_size;
    self->sized = sized;
    self->has_layout = PyObject_HasAttr(rating, str_layout);
    self->has_settled = self->has_layout && PyObject_HasAttr(rating, str_settled);
    if (kernel_api(rating, &self->kernel) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    /* tables sized for the files the caller expects (and as many groups, at most): growing one moves every record,
     * a cache miss each, and a trace of many objects grew them a dozen times */
    if (table_init(&self->files, sizeof(File), reserve) < 0 || table_init(&self->groups, sizeof(Group), reserve) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* the policy holds the loop and the loop the rating, whose on_switch holds the policy weakly: no cycle, unless a
 * caller makes one.  The records' objects are ints and sets of ints: no cycle goes through them. */
static int
Loop_traverse(Loop *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->rating);
    Py_VISIT(self->keys);
    Py_VISIT(self->admission);
    return 0;
}

static int
Loop_clear(Loop *self)
{
    Py_CLEAR(self->rating);
    Py_CLEAR(self->keys);
    Py_CLEAR(self->admission);
    return 0;
}

static void
free_tables(Loop *self)
{
    for (Py_ssize_t i = 0; i < self->files.count; i++) {
        File *file = (File *)RECORD(&self->files, i);
        Py_XDECREF(file->group);
        Py_XDECREF(file->groups);
    }
    for (Py_ssize_t i = 0; i < self->groups.count; i++) {
        Group *group = (Group *)RECORD(&self->groups, i);
        Py_XDECREF(group->group);
    }
    PyMem_Free(self->files.index);
    PyMem_Free(self->files.records);
    PyMem_Free(self->groups.index);
    PyMem_Free(self->groups.records);
    PyMem_Free(self->heap.entries);
    PyMem_Free(self->window.entries);
    PyMem_Free(self->queue.a);
    PyMem_Free(self->ghost.a);
}

static void
Loop_dealloc(Loop *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Loop_clear(self);
    free_tables(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyMethodDef Loop_methods[] = {
    {"replay", (PyCFunction)(void (*)(void))Loop_replay, METH_FASTCALL, replay_doc},
    {"rekey", (PyCFunction)Loop_rekey, METH_NOARGS, rekey_doc},
    {"file_key", (PyCFunction)Loop_file_key, METH_O, file_key_doc},
    {"contents", (PyCFunction)Loop_contents, METH_NOARGS, contents_doc},
    {NULL, NULL, 0, NULL},
};

static PyObject *
get_reads_kernel(Loop *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->kernel != NULL);
}

static PyGetSetDef Loop_getset[] = {
    {"reads_kernel", (getter)get_reads_kernel, NULL,
     "Whether it calls the adaptive kernel's C functions (its rating's _c_api()) for accesses and keys instead of\n"
     "access() and keys(): it then never reads keys(), so the rating need not keep them (mirror_keys).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef Loop_members[] = {
    {"window_used", T_LONGLONG, offsetof(Loop, window_used), READONLY,
     "With a TinyLFU filter: the bytes of the files in the window."},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Loop_slots[] = {
    {Py_tp_doc, "Loop(*, rating, capacity, per_job, per_size, sized, reserve, admission)\n--\n\n"
                "The cache of HTDAPolicy (with a TinyLFU filter if ``admission``): its tables (sized for ``reserve``\n"
                "files) and its request loop."},
    {Py_tp_new, Loop_new},
    {Py_tp_dealloc, Loop_dealloc},
    {Py_tp_traverse, Loop_traverse},
    {Py_tp_clear, Loop_clear},
    {Py_tp_methods, Loop_methods},
    {Py_tp_members, Loop_members},
    {Py_tp_getset, Loop_getset},
    {0, NULL},
};

static PyType_Spec Loop_spec = {
    .name = "htda.simulator._replay.Loop",
    .basicsize = sizeof(Loop),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = Loop_slots,
};

static int
module_constants(void)
{
    if ((unit_weight == NULL && (unit_weight = PyFloat_FromDouble(1.0)) == NULL)
        || (str_key == NULL && (str_key = PyUnicode_InternFromString("key")) == NULL)
        || (str_layout == NULL && (str_layout = PyUnicode_InternFromString("layout")) == NULL)
        || (str_settled == NULL && (str_settled = PyUnicode_InternFromString("settled")) == NULL)
        || (str_before == NULL && (str_before = PyUnicode_InternFromString("before")) == NULL)
        || (str_sampled == NULL && (str_sampled = PyUnicode_InternFromString("sampled")) == NULL)
        || (str_sample_size == NULL && (str_sample_size = PyUnicode_InternFromString("sample_size")) == NULL)
        || (str_samples == NULL && (str_samples = PyUnicode_InternFromString("samples")) == NULL))
        return -1;
    return 0;
}

HTDA_MODULE(_replay, "htda.simulator._replay", "The cache of HTDAPolicy (htda.simulator.htda_policy) in C.",
            Loop_spec, "Loop", module_constants)
