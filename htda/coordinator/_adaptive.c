/* htda.coordinator._adaptive: the hot path of lrfu-adaptive (htda/coordinator/adaptive.py) in C.
 *
 * Kernel is the base of AdaptiveLRFUPolicy: it keeps every group's LRFU key at each candidate half-life and
 * the miniature ("shadow") caches of the sampled groups, and records an access in one call.  The policy's
 * logic around it (decisions, switches, configuration) stays in Python; the arithmetic is Python's, step for
 * step, so the keys, the caches and the decisions are bit for bit those of the straightforward Python the
 * tests keep as a reference (tests/coordinator/test_adaptive.py).
 *
 * Layout:
 * - every group has a slot (found through `index`, a table of the slots' mixed hashes: see GroupIndex), a Slot
 *   record holding its group (a reference), its keys at the `nc`
 *   candidates (`keys`, KEYS()), its mixed hash (`mix`: the sampling hash, computed once) and its sampled index
 *   (`sidx`, -1 when it is not in the sample);
 * - the active candidate's keys are also in the dict `_keys` (the policy's keys(), read by the coordinator),
 *   in the order groups were first keyed; the slot holds a reference to its group's float there (`held`),
 *   which it updates in place while nobody else holds it (see set_active_key).  Unless `unmirrored`
 *   (mirror_keys False: the simulator's compiled cache reads each key from the slots, and writing a float
 *   an access and every group's at a switch of half-life cost it a fifth to two fifths of a small cache's
 *   replay with many switches, P6 at 1 %, and 73 bytes a group);
 * - every sampled group has a sampled index: `s_slot`/`s_group` name its slot and group, and its row of `cells` (one
 *   a shadow, side by side: what an access of it reads) hold a copy of its key at that shadow's candidate, the
 *   size that shadow holds of it (OUT when it does not hold it) and when it came in there (the order of
 *   a Python dict of residents, for sums in that order);
 * - the shadows are ns, one per candidate and *layout* (the policy's `layouts`, a block of nc shadows
 *   each), and, if asked for, one per layout at the active candidate, smaller by a share (`scale`): a shadow
 *   evicts by its `candidate` (k % nc in the blocks), laid out as its `layout` says:
 *   - PLAIN: it admits every group and evicts the lowest keys;
 *   - ASKING: it admits a missed group only if the group's key before this access beats the key of each victim
 *     it would displace (TinyLFU's question, asked of LRFU keys: a group read once never displaces one read
 *     before); with it (or PROBATION) every group also has the keys it had before its latest access (BEFORE(),
 *     after its keys in its slot; -inf for a group accessed once: the coordinator's placement on probation asks
 *     for them);
 *   - PROBATION: S3-FIFO's quick demotion (Yang et al., SOSP'23) in front of the lowest-key order: a missed
 *     group enters a FIFO queue (`queue`), where it stays until PROBATION_SHARE of the capacity is queued;
 *     leaving the queue it goes to the main part (the heap) if it was read again meanwhile, else out, its
 *     sampled index and size remembered in a FIFO ghost list (`ghost`, at most the main part's share of the
 *     capacity); a missed group found there goes straight to the main part.  Its per-group state is an Extra
 *     record in each sampled group's row, after the cells (EXTRA());
 * - each shadow's eviction order is a heap (4-ary) of (key when pushed, sampled index), lazy as keys only
 *   grow: an entry whose group's key has changed is re-pushed with the current key when it reaches the top.
 *   The heap pops the least (key, group), ties broken by comparing the groups as Python does for tuples: so
 *   the victims are those of a heapq of (key, group) tuples, whatever the heap's layout.
 *
 * The smaller shadows serve while the others have all hit alike (the policy's rule); then they are retired:
 * emptied, and past `nlive`, never replayed again.
 *
 * Compile without floating-point contraction (setup.py: -ffp-contract=off), so that a*b+c rounds twice as
 * in Python. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include "../_kernel.h"
#include "../_adaptive_api.h"
#include <math.h>
#include <stdint.h>
#include <string.h>

/* 1.0 + 2.0**d rounds to exactly 1.0 for d <= -53: the log-add then adds nothing (htda.coordinator.rating) */
#define NEGLIGIBLE (-53.0)
#define MIX1 0x9E3779B97F4A7C15ULL
#define MIX2 0xBF58476D1CE4E5B9ULL
#define OUT (-1.0) /* a shadow's size of a group it does not hold (sizes are >= 0) */
/* the share of a probation shadow's capacity its queue may fill (S3-FIFO's small queue), and the layouts */
#define PROBATION_SHARE HTDA_PROBATION_SHARE
enum { PLAIN = HTDA_PLAIN, ASKING = HTDA_ASKING, PROBATION = HTDA_PROBATION, LIRS = HTDA_LIRS };
enum { MAIN = 0, QUEUED = 1, READ_AGAIN = 2 }; /* where a probation shadow holds a group */

typedef struct {
    double key; /* the group's key when the entry was pushed */
    Py_ssize_t s; /* its sampled index */
} Entry;

typedef struct {
    double key; /* the group's key at this candidate (a copy of its slot's, kept in step) */
    double size; /* the size this candidate's shadow holds of it, OUT when it does not hold it */
    uint64_t since; /* when it came in */
} Cell;

/* a probation shadow's record of a sampled group */
typedef struct {
    uint64_t ghost; /* the stamp of its entry in the ghost list, 0 when it is not there */
    double gone; /* its size when it went to the ghost list */
    int where; /* MAIN (or not held), QUEUED, READ_AGAIN (queued and read since) */
} Extra;

/* an entry of a probation shadow's queue (stamp unused) or ghost list */
typedef struct {
    Py_ssize_t s;
    double size;
    uint64_t stamp;
} Queued;

HTDA_RING(fifo, Queued)
typedef fifo_ring Ring;

typedef struct {
    uint64_t clock; /* groups that came in so far */
    Entry *heap;
    Py_ssize_t n, cap;
    double used, hits;
    double scale; /* its size as a share of shadow_capacity: 1, or the smaller shadows' share */
    int candidate, layout; /* whose keys it evicts by, and how it lays itself out */
    /* a probation shadow's: its queue and ghost list, the bytes in each, the ghost entries stamped so far, and a
     * record per sampled index (NULL for the other layouts) */
    Ring queue, ghost;
    double queued, ghosted;
    uint64_t stamps;
    int xi; /* a probation or LIRS shadow's record of a sampled group is its row's xi-th Extra (-1: none) */
} Shadow;

/* A sampled group's number when it is an int (as the simulator's groups are), so that entries of equal keys
 * compare in C: many do (every group read once at the same second has the same key) */
typedef struct {
    long long number;
    int is_int; /* the group is an int (exactly; bool compares otherwise) of 64 bits */
} Tiebreak;

/* A group's slot: what an access of it reads and writes, side by side (one record, not one array each: on a
 * large trace every array is a cache miss of its own). */
typedef struct {
    PyObject *owner; /* its group (a reference; NULL once forgotten) */
    PyObject *held; /* the float _keys holds for its group (a reference), or NULL */
    uint64_t mix; /* its sampling hash */
    Py_ssize_t sidx; /* its sampled index, -1 when it is not in the sample */
    double keys[]; /* its key at each candidate; then, if the kernel keeps_before, its keys before its latest access */
} Slot;

/* group -> slot: an open-addressing table of tagged slots (HtdaTagSlot: its tag, 1 + the slot), probed linearly,
 * at most half full.  A group is found by its mixed hash (the sampling hash, a bijection of its Python hash): the
 * table's home and 32-bit tag are bits of it, a matching tag is checked against the slot's whole mix, then the
 * slot's group is the one asked for or equal to it, as a dict finds a key.  8 bytes a table entry, where a dict of
 * slot numbers took some 73 bytes a group (its entry, its index and an int object per slot number). */
typedef HtdaTagSlot IndexEntry;

typedef struct {
    IndexEntry *entries;
    Py_ssize_t mask, count; /* entries - 1 (0 before the first group), groups held */
} GroupIndex;

/* most slots the index can name */
#define MOST_SLOTS HTDA_MOST_PLACES

typedef struct {
    PyObject_HEAD
    PyObject *keys; /* _keys: group -> its key at the active candidate (dict) */
    PyObject *touched; /* _touched: groups accessed since take_touched (set) */
    GroupIndex index; /* group -> slot */
    double epoch, now;
    int nc, ns, active, busy, failed; /* candidates, shadows (nc per layout, per size) */
    int nlive; /* the shadows replayed: the first nlive (smaller ones past them are retired: empty, never hit) */
    int layout; /* how the cache around the rating should lay itself out now (the policy sets it) */
    char settled; /* on probation, whether the files read once that the cache holds go on probation too (idem) */
    char unmirrored; /* _keys is kept empty (mirror_keys False): the keys are only in the slots */
    double *inverse; /* 1 / half-life of each candidate */
    /* slots: one Slot record each, slot_size bytes apart */
    char *slots;
    size_t slot_size;
    int keeps_before; /* the slots keep the keys before the latest access too */
    int whole_sizes; /* every sampled access so far had a whole size: sums of them below 2**53 are exact in any order */
    Py_ssize_t nslots, slot_cap, *free_slots, nfree, free_cap; /* slots of forgotten groups, to reuse */
    /* the sample */
    int sample_all; /* the threshold is 2**64: every group */
    uint64_t threshold;
    double sample_rate;
    uint64_t sample_salt; /* xor-ed into every group's hash before mixing: another salt, another sample */
    Py_ssize_t max_sampled, nsampled;
    Py_ssize_t *s_slot, s_top, s_cap, *s_free, s_nfree;
    PyObject **s_group;
    Tiebreak *s_tiebreak; /* sampled index -> its group as a C integer, if it is an int */
    /* a row per sampled index, row_size bytes apart: its ns Cells (one per shadow), then its nx Extras (one per
     * shadow that has a record: see Shadow.xi).  Side by side, what an access reads of every shadow is a few cache
     * lines in a row, where an array of Extras per shadow cost a cache miss each: a fifth of web07's replay. */
    char *cells;
    size_t row_size;
    int nx;
    /* the shadows, one per candidate and layout */
    Shadow *shadows;
    double capacity, shadow_capacity, round_bytes;
    Py_ssize_t sampled, decision_every;
} Kernel;

static PyObject *str_decide;

#define ROW(self, s) ((self)->cells + (size_t)(s) * (self)->row_size)
#define CELL(self, s, k) ((Cell *)ROW(self, s) + (k))
/* sampled index s's record in shadow (which has one) */
#define EXTRA(self, s, shadow) ((Extra *)(ROW(self, s) + (size_t)(self)->ns * sizeof(Cell)) + (shadow)->xi)
#define SLOT(self, i) ((Slot *)((self)->slots + (size_t)(i) * (self)->slot_size))
#define KEYS(self, i) (SLOT(self, i)->keys) /* its keys at the nc candidates */
#define BEFORE(self, i) (SLOT(self, i)->keys + (self)->nc) /* its keys before its latest access (keeps_before) */

static int ready(Kernel *self);

/* -- small helpers ------------------------------------------------------------------------------------- */

/* the group's sampling hash: its Python hash, xor the salt (0 by default: AdaptiveLRFUPolicy's sample_seed), mixed */
static int
mixed(PyObject *group, uint64_t salt, uint64_t *out)
{
    Py_hash_t hash = PyObject_Hash(group);
    if (hash == -1 && PyErr_Occurred())
        return -1;
    uint64_t h = ((uint64_t)hash ^ salt) * MIX1;
    h ^= h >> 29;
    h *= MIX2;
    *out = h ^ (h >> 32);
    return 0;
}

static inline int
in_sample(Kernel *self, uint64_t mix)
{
    return self->sample_all || mix < self->threshold;
}

/* keys[group] = log_add(keys[group], x), as htda.coordinator.rating.add_key does it */
static inline double
add_key(double old, double x)
{
    if (old < x) {
        double d = old - x;
        return d <= NEGLIGIBLE ? x : x + log2(1.0 + pow(2.0, d));
    }
    if (x - old > NEGLIGIBLE)
        return old + log2(1.0 + pow(2.0, x - old));
    return old;
}

/* _keys[group] = key, group having slot.  The float _keys holds is changed in place while its only references
 * are the dict's and the slot's: no one can see it change but through _keys, and an access costs neither an
 * allocation nor a dict lookup.  A float anyone else holds (a reader keeping keys[group]) is never changed: a
 * new one replaces it in _keys. */
static int
set_active_key(Kernel *self, PyObject *group, Py_ssize_t slot, double key)
{
    if (self->unmirrored)
        return 0;
    PyObject *held = SLOT(self, slot)->held;
    if (held != NULL && Py_REFCNT(held) == 2) {
        ((PyFloatObject *)held)->ob_fval = key;
        return 0;
    }
    PyObject *value = PyFloat_FromDouble(key);
    if (value == NULL)
        return -1;
    if (PyDict_SetItem(self->keys, group, value) < 0) {
        Py_DECREF(value);
        return -1;
    }
    Py_XSETREF(SLOT(self, slot)->held, value);
    return 0;
}

/* arg as an index below limit, of a candidate (nc) or a shadow (ns) (-1 with an exception if it is not one) */
static int
candidate(Kernel *self, PyObject *arg, int shadows)
{
    long c = PyLong_AsLong(arg);
    if (c == -1 && PyErr_Occurred())
        return -1;
    if (!ready(self))
        return -1;
    if (c < 0 || c >= (shadows ? self->ns : self->nc)) {
        PyErr_SetString(PyExc_ValueError, "no such candidate");
        return -1;
    }
    return (int)c;
}

/* whether slot (a caller's hint) is still group's: the same object the index holds */
static inline int
owns(const Kernel *self, Py_ssize_t slot, PyObject *group)
{
    return slot >= 0 && slot < self->nslots && SLOT(self, slot)->owner == group;
}

/* the slot of group, whose mixed hash is mix, or -1 when it has none (-2 on error); *at, if not NULL, gets the
 * index entry that names it */
static Py_ssize_t
find_slot(Kernel *self, PyObject *group, uint64_t mix, Py_ssize_t *at)
{
    const GroupIndex *index = &self->index;
    if (index->entries == NULL)
        return -1;
    uint32_t tag = htda_tag(mix);
    for (Py_ssize_t i = htda_home(index->mask, mix);; i = (i + 1) & index->mask) {
        IndexEntry entry = index->entries[i];
        if (!entry.at)
            return -1;
        if (entry.tag != tag)
            continue;
        Slot *record = SLOT(self, entry.at - 1);
        if (record->mix != mix)
            continue;
        int same = record->owner == group;
        if (!same) {
            PyObject *owner = record->owner;
            Py_INCREF(owner); /* == may run code that forgets it */
            same = PyObject_RichCompareBool(owner, group, Py_EQ);
            Py_DECREF(owner);
            if (same < 0)
                return -2;
        }
        if (same) {
            if (at != NULL)
                *at = i;
            return entry.at - 1;
        }
    }
}

/* the slot of group, or -1 when it has none (-2 on error) */
static Py_ssize_t
slot_of(Kernel *self, PyObject *group)
{
    uint64_t mix;
    if (mixed(group, self->sample_salt, &mix) < 0)
        return -2;
    return find_slot(self, group, mix, NULL);
}

/* room in the index for one more group (growing it to keep it at most half full) */
static int
index_room(Kernel *self)
{
    GroupIndex *index = &self->index;
    if (index->entries != NULL && 2 * (index->count + 1) <= index->mask + 1)
        return 0;
    Py_ssize_t size = index->entries == NULL ? 1024 : 2 * (index->mask + 1);
    while (2 * (index->count + 1) > size)
        size *= 2;
    IndexEntry *entries = PyMem_Calloc((size_t)size, sizeof(IndexEntry));
    if (entries == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t mask = size - 1;
    for (Py_ssize_t i = 0; index->entries != NULL && i <= index->mask; i++) {
        IndexEntry entry = index->entries[i];
        if (entry.at)
            *htda_empty_slot(entries, mask, SLOT(self, entry.at - 1)->mix) = entry;
    }
    PyMem_Free(index->entries);
    index->entries = entries;
    index->mask = mask;
    return 0;
}

/* the index names slot (whose mix is set) for its group: a group not in it, with room made */
static void
index_add(Kernel *self, Py_ssize_t slot)
{
    GroupIndex *index = &self->index;
    uint64_t mix = SLOT(self, slot)->mix;
    *htda_empty_slot(index->entries, index->mask, mix) = (IndexEntry){htda_tag(mix), (uint32_t)(slot + 1)};
    index->count++;
}

/* the index forgets its entry i, moving back the entries after it that probing would no longer reach (linear
 * probing's deletion: no tombstones) */
static void
index_remove(Kernel *self, Py_ssize_t i)
{
    GroupIndex *index = &self->index;
    Py_ssize_t mask = index->mask;
    for (Py_ssize_t j = (i + 1) & mask; index->entries[j].at; j = (j + 1) & mask) {
        Py_ssize_t home = htda_home(mask, SLOT(self, index->entries[j].at - 1)->mix);
        /* entry j may fill the hole at i if its home is not cyclically in (i, j] */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            index->entries[i] = index->entries[j];
            i = j;
        }
    }
    index->entries[i] = (IndexEntry){0, 0};
    index->count--;
}

/* every group's reference and the index (the slots stay) */
static void
clear_index(Kernel *self)
{
    for (Py_ssize_t slot = 0; self->slots != NULL && slot < self->nslots; slot++)
        Py_CLEAR(SLOT(self, slot)->owner);
    PyMem_Free(self->index.entries);
    self->index = (GroupIndex){NULL, 0, 0};
}

/* a sampled group's cells get its keys (each shadow's at its candidate) */
static inline void
sync_cells(Kernel *self, Py_ssize_t slot)
{
    Py_ssize_t s = SLOT(self, slot)->sidx;
    if (s >= 0)
        for (int k = 0; k < self->nlive; k++)
            CELL(self, s, k)->key = KEYS(self, slot)[self->shadows[k].candidate];
}

/* room for cap slots (cap > slot_cap) */
static int
grow_slots(Kernel *self, Py_ssize_t cap)
{
    if (htda_grow((void **)&self->slots, cap, self->slot_size) < 0)
        return -1;
    self->slot_cap = cap;
    return 0;
}

static Py_ssize_t
new_slot(Kernel *self, PyObject *group)
{
    uint64_t mix;
    if (mixed(group, self->sample_salt, &mix) < 0)
        return -1;
    Py_ssize_t slot;
    if (index_room(self) < 0)
        return -1;
    if (self->nfree > 0) {
        slot = self->free_slots[--self->nfree];
    }
    else {
        if (self->nslots == MOST_SLOTS) {
            PyErr_Format(PyExc_MemoryError, "lrfu-adaptive keeps at most %zd groups", MOST_SLOTS);
            return -1;
        }
        if (self->nslots == self->slot_cap && grow_slots(self, self->slot_cap ? 2 * self->slot_cap : 1024) < 0)
            return -1;
        slot = self->nslots++;
    }
    Slot *record = SLOT(self, slot);
    record->mix = mix;
    record->sidx = -1;
    record->held = NULL;
    Py_INCREF(group);
    record->owner = group;
    index_add(self, slot);
    if (self->keeps_before)
        for (int c = 0; c < self->nc; c++)
            BEFORE(self, slot)[c] = -INFINITY;
    return slot;
}

/* -- the shadows' heaps ---------------------------------------------------------------------------------- */

/* entry a < entry b: by key, then by group as Python compares tuples (an error sets self->failed) */
static inline int
entry_lt(Kernel *self, const Entry *a, const Entry *b)
{
    if (a->key < b->key)
        return 1;
    if (a->key == b->key && a->s != b->s) {
        const Tiebreak *x = &self->s_tiebreak[a->s], *y = &self->s_tiebreak[b->s];
        if (x->is_int && y->is_int)
            return x->number < y->number;
        int lt = PyObject_RichCompareBool(self->s_group[a->s], self->s_group[b->s], Py_LT);
        if (lt < 0) {
            self->failed = 1;
            return 0;
        }
        return lt;
    }
    return 0;
}

HTDA_HEAP(shadow, Entry, Kernel, entry_lt)

static int
push(Kernel *self, Shadow *shadow, double key, Py_ssize_t s)
{
    if (shadow->n == shadow->cap) {
        Py_ssize_t cap = shadow->cap ? 2 * shadow->cap : 256;
        if (htda_grow((void **)&shadow->heap, cap, sizeof(Entry)) < 0)
            return -1;
        shadow->cap = cap;
    }
    shadow->heap[shadow->n].key = key;
    shadow->heap[shadow->n].s = s;
    shadow_sift_up(self, shadow->heap, shadow->n++);
    return 0;
}

/* Shadow k's lowest entry (its heap is not empty), once the entries above it whose groups were accessed since
 * they were pushed are re-pushed with their keys now (check self->failed) */
static Entry *
settled_top(Kernel *self, Shadow *shadow, int k)
{
    for (;;) {
        Entry *top = &shadow->heap[0];
        double current = CELL(self, top->s, k)->key;
        if (current == top->key || self->failed)
            return top;
        top->key = current;
        shadow_sift_down(self, shadow->heap, shadow->n, 0);
    }
}

/* shadow's top entry leaves its heap: its sampled index */
static Py_ssize_t
pop_top(Kernel *self, Shadow *shadow)
{
    Py_ssize_t top = shadow->heap[0].s;
    shadow->heap[0] = shadow->heap[--shadow->n];
    if (shadow->n)
        shadow_sift_down(self, shadow->heap, shadow->n, 0);
    return top;
}

/* shadow k's top entry goes, and its group with it */
static void
drop_top(Kernel *self, Shadow *shadow, int k)
{
    Cell *gone = CELL(self, pop_top(self, shadow), k);
    shadow->used -= gone->size;
    gone->size = OUT;
}

/* shadow k's lowest current key goes, and its group with it (the shadow is not empty) */
static int
drop_lowest(Kernel *self, Shadow *shadow, int k)
{
    settled_top(self, shadow, k);
    if (!self->failed)
        drop_top(self, shadow, k);
    return self->failed ? -1 : 0;
}

/* Evict the lowest keys of shadow k until `size` more fits in capacity.  `asking` (an admission shadow, for a
 * group whose key before this access was `before`): stop at the first victim whose key is at least `before`
 * (the victims that went before it stay gone).  1 when it fits (or the shadow is empty), 0 when stopped, -1 on
 * error. */
static int
make_room(Kernel *self, int k, double size, double capacity, int asking, double before)
{
    Shadow *shadow = &self->shadows[k];
    while (shadow->used + size > capacity && shadow->n) {
        Entry *top = settled_top(self, shadow, k);
        if (self->failed)
            return -1;
        if (asking && before <= top->key)
            return 0;
        drop_top(self, shadow, k);
        if (self->failed)
            return -1;
    }
    return 1;
}

/* -- a probation shadow's queue and ghost list ----------------------------------------------------------------- */

/* Keep the entries of ring (of probation shadow k) whose sampled index is not leaving (the flags of `leaving`, or
 * NULL and `only`), in order; `out` is called on each that goes.  1 if any went. */
static int
ring_filter(Kernel *self, int k, Ring *ring, const char *leaving, Py_ssize_t only,
            void (*out)(Kernel *, int, const Queued *))
{
    Py_ssize_t kept = 0;
    for (Py_ssize_t i = 0; i < ring->n; i++) {
        Queued entry = *fifo_at(ring, i);
        if (leaving ? leaving[entry.s] : entry.s == only)
            out(self, k, &entry);
        else
            *fifo_at(ring, kept++) = entry;
    }
    int changed = kept != ring->n;
    ring->n = kept;
    return changed;
}

/* The oldest queued group of probation shadow k leaves the queue: to the main part if it was read again while
 * queued, else out of the shadow and into the ghost list (whose oldest entries go while it holds more than the
 * main part's share of the capacity; an entry whose group came back since is already gone). */
static int
dequeue(Kernel *self, Shadow *shadow, int k, double capacity)
{
    Py_ssize_t s = fifo_pop(&shadow->queue).s;
    Cell *cell = CELL(self, s, k);
    Extra *extra = EXTRA(self, s, shadow);
    shadow->queued -= cell->size;
    int read_again = extra->where == READ_AGAIN;
    extra->where = MAIN;
    if (read_again)
        return push(self, shadow, cell->key, s);
    shadow->used -= cell->size;
    Queued ghost = {s, cell->size, ++shadow->stamps};
    cell->size = OUT;
    if (fifo_push(&shadow->ghost, ghost) < 0)
        return -1;
    extra->ghost = ghost.stamp;
    extra->gone = ghost.size;
    shadow->ghosted += ghost.size;
    while (shadow->ghosted > (1.0 - PROBATION_SHARE) * capacity && shadow->ghost.n) {
        Queued old = fifo_pop(&shadow->ghost);
        Extra *was = EXTRA(self, old.s, shadow);
        if (was->ghost == old.stamp) {
            was->ghost = 0;
            shadow->ghosted -= old.size;
        }
    }
    return 0;
}

/* Probation shadow k frees room until it fits capacity: the queue's oldest group leaves while the queue holds
 * its share of the capacity (or the main part is empty), else the main part's lowest key goes. */
static int
settle(Kernel *self, int k, double capacity)
{
    Shadow *shadow = &self->shadows[k];
    while (shadow->used > capacity) {
        int from_queue = shadow->queue.n && (shadow->queued >= PROBATION_SHARE * capacity || !shadow->n);
        if (!from_queue && !shadow->n)
            break;
        if ((from_queue ? dequeue(self, shadow, k, capacity) : drop_lowest(self, shadow, k)) < 0 || self->failed)
            return -1;
    }
    return 0;
}

/* -- LIRS shadows -------------------------------------------------------------------------------------------------
 * LIRS (Jiang and Zhang, SIGMETRICS'02) over the candidate's keys: the heap is the protected (LIR) set, at most
 * 1 - LIRS_SHARE of the capacity, lowest key out; the queue holds the other resident groups (HIR) in arrival order,
 * with lazy deletion (extra->ghost is the stamp of a group's live entry).  A group joins the heap while it has room,
 * or when its key before this access beats the heap's lowest (at a short half-life: read again while more recent
 * than the oldest protected group, LIRS's "still in the stack", with no stack kept); the heap's lowest then go to
 * the queue's tail.  Room is made from the queue's head. */

#define LIRS_SHARE HTDA_LIRS_SHARE

static int
lirs_enqueue(Shadow *shadow, Extra *extra, Py_ssize_t s, double size)
{
    Queued entry = {s, size, ++shadow->stamps};
    if (fifo_push(&shadow->queue, entry) < 0)
        return -1;
    extra->ghost = entry.stamp;
    extra->where = QUEUED;
    shadow->queued += size;
    return 0;
}

/* a queued group leaves the queue (its entry goes stale), its size `size` */
static void
lirs_unqueue(Shadow *shadow, Extra *extra, double size)
{
    extra->ghost = 0;
    extra->where = MAIN;
    shadow->queued -= size;
}

/* whether a queue entry is its group's live one (not one it left, or was queued again after) */
static inline int
lirs_live(const Kernel *self, const Shadow *shadow, const Queued *entry)
{
    const Extra *extra = EXTRA(self, entry->s, shadow);
    return extra->ghost == entry->stamp && extra->where == QUEUED;
}

/* drop the stale entries of shadow's queue */
static void
lirs_compact(const Kernel *self, Shadow *shadow)
{
    Py_ssize_t kept = 0;
    for (Py_ssize_t i = 0; i < shadow->queue.n; i++) {
        Queued entry = *fifo_at(&shadow->queue, i);
        if (lirs_live(self, shadow, &entry))
            *fifo_at(&shadow->queue, kept++) = entry;
    }
    shadow->queue.n = kept;
}

static int
lirs_recent(Kernel *self, Shadow *shadow, int k, double before)
{
    if (!shadow->n || before == -INFINITY)
        return 0;
    Entry *top = settled_top(self, shadow, k);
    if (self->failed)
        return -1;
    return before > top->key;
}

static int
lirs_demote(Kernel *self, Shadow *shadow, int k, double capacity)
{
    while (shadow->n > 1 && shadow->used - shadow->queued > (1.0 - LIRS_SHARE) * capacity) {
        settled_top(self, shadow, k);
        if (self->failed)
            return -1;
        Py_ssize_t low = pop_top(self, shadow);
        if (self->failed || lirs_enqueue(shadow, EXTRA(self, low, shadow), low, CELL(self, low, k)->size) < 0)
            return -1;
    }
    return 0;
}

/* LIRS shadow k's queue's oldest entry goes, and its group out of the shadow if the entry is live */
static void
lirs_drop_oldest(Kernel *self, Shadow *shadow, int k)
{
    Queued oldest = fifo_pop(&shadow->queue);
    if (!lirs_live(self, shadow, &oldest))
        return;
    Cell *cell = CELL(self, oldest.s, k);
    lirs_unqueue(shadow, EXTRA(self, oldest.s, shadow), cell->size);
    shadow->used -= cell->size;
    cell->size = OUT;
}

/* LIRS shadow k frees room until it fits capacity: the queue's oldest first, then the main part's lowest key */
static int
lirs_settle(Kernel *self, int k, double capacity)
{
    Shadow *shadow = &self->shadows[k];
    while (shadow->used > capacity) {
        if (shadow->queue.n)
            lirs_drop_oldest(self, shadow, k);
        else if (!shadow->n)
            break;
        else if (drop_lowest(self, shadow, k) < 0)
            return -1;
    }
    return 0;
}

/* one access of sampled group s through LIRS shadow k: a hit (old != OUT), its bytes counted, or a miss that fits;
 * `befores`: the group's keys before this access, one per candidate (NULL if not kept) */
static int
lirs_access(Kernel *self, int k, Py_ssize_t s, double size, double old, const double *befores, double capacity)
{
    Shadow *shadow = &self->shadows[k];
    double before = befores == NULL ? -INFINITY : befores[shadow->candidate];
    Extra *extra = EXTRA(self, s, shadow);
    Cell *cell = CELL(self, s, k);
    if (old != OUT) {
        if (extra->where != QUEUED)
            return 0;
        int recent = lirs_recent(self, shadow, k, before);
        if (recent < 0)
            return -1;
        lirs_unqueue(shadow, extra, cell->size);
        if (!recent)
            return lirs_enqueue(shadow, extra, s, cell->size);
        if (push(self, shadow, cell->key, s) < 0)
            return -1;
        return lirs_demote(self, shadow, k, capacity);
    }
    int recent = shadow->used - shadow->queued + size <= (1.0 - LIRS_SHARE) * capacity;
    if (!recent && (recent = lirs_recent(self, shadow, k, before)) < 0)
        return -1;
    cell->size = size;
    cell->since = shadow->clock++;
    shadow->used += size;
    if (recent) {
        if (push(self, shadow, cell->key, s) < 0 || lirs_demote(self, shadow, k, capacity) < 0)
            return -1;
    }
    else if (lirs_enqueue(shadow, extra, s, size) < 0)
        return -1;
    return shadow->used > capacity ? lirs_settle(self, k, capacity) : 0;
}

/* evict from shadow k until it fits in capacity */
static int
evict(Kernel *self, int k, double capacity)
{
    if (self->shadows[k].layout == LIRS)
        return lirs_settle(self, k, capacity);
    if (self->shadows[k].layout == PROBATION)
        return settle(self, k, capacity);
    return make_room(self, k, 0.0, capacity, 0, 0.0) < 0 ? -1 : 0;
}

typedef struct {
    uint64_t since;
    Py_ssize_t s;
} Arrival;

static int
by_arrival(const void *a, const void *b)
{
    uint64_t x = ((const Arrival *)a)->since, y = ((const Arrival *)b)->since;
    return (x > y) - (x < y);
}

/* The sampled indices candidate c's shadow holds, in the order they came in (a new array of *count; NULL on
 * error). */
static Arrival *
arrivals(Kernel *self, int c, Py_ssize_t *count)
{
    Arrival *held = PyMem_Malloc((size_t)(self->s_top ? self->s_top : 1) * sizeof(Arrival));
    if (held == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    Py_ssize_t n = 0;
    for (Py_ssize_t s = 0; s < self->s_top; s++) {
        Cell *cell = CELL(self, s, c);
        if (cell->size != OUT) {
            held[n].since = cell->since;
            held[n++].s = s;
        }
    }
    qsort(held, (size_t)n, sizeof(Arrival), by_arrival);
    *count = n;
    return held;
}

/* a queued group leaves probation shadow k (and the shadow) */
static void
leaves_queue(Kernel *self, int k, const Queued *entry)
{
    EXTRA(self, entry->s, &self->shadows[k])->where = MAIN;
    CELL(self, entry->s, k)->size = OUT;
}

/* a group leaves probation shadow k's ghost list */
static void
leaves_ghost(Kernel *self, int k, const Queued *entry)
{
    Extra *extra = EXTRA(self, entry->s, &self->shadows[k]);
    if (extra->ghost == entry->stamp)
        extra->ghost = 0;
}

/* a probation shadow's queued and ghost bytes summed again, in their lists' order (as sum() over an ordered
 * dict adds them) */
static void
sum_lists(Kernel *self, Shadow *shadow, int k)
{
    double queued = 0.0, ghosted = 0.0;
    for (Py_ssize_t i = 0; i < shadow->queue.n; i++)
        queued += CELL(self, fifo_at(&shadow->queue, i)->s, k)->size;
    for (Py_ssize_t i = 0; i < shadow->ghost.n; i++) {
        const Queued *entry = fifo_at(&shadow->ghost, i);
        if (EXTRA(self, entry->s, shadow)->ghost == entry->stamp)
            ghosted += entry->size;
    }
    shadow->queued = queued;
    shadow->ghosted = ghosted;
}

/* The bytes shadow c holds into *used, summed as a dict of its residents in the order they came in would sum them.
 * When every size is a whole number (as the simulator's byte counts are) and the total is below 2**53, every
 * partial sum is exact, so any order gives that sum: the heap's and the queue's entries are added as they lie.
 * Otherwise they are sorted by arrival first (a halving of the sample does this for every shadow: the sort and the
 * scan over every sampled group were a twelfth of AdaptSize's replay).  0, or -1 with an exception set. */
static int
held_bytes(Kernel *self, int c, double *used)
{
    Shadow *shadow = &self->shadows[c];
    double sum = 0.0;
    if (shadow->layout == LIRS)
        lirs_compact(self, shadow);
    if (self->whole_sizes) {
        for (Py_ssize_t i = 0; i < shadow->n; i++)
            sum += CELL(self, shadow->heap[i].s, c)->size;
        if (shadow->layout >= PROBATION)
            for (Py_ssize_t i = 0; i < shadow->queue.n; i++)
                sum += CELL(self, fifo_at(&shadow->queue, i)->s, c)->size;
        if (sum < 9007199254740992.0) { /* sizes are >= 0: no partial sum was larger */
            *used = sum;
            return 0;
        }
        sum = 0.0;
    }
    Py_ssize_t n;
    Arrival *held = arrivals(self, c, &n);
    if (held == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++)
        sum += CELL(self, held[i].s, c)->size;
    PyMem_Free(held);
    *used = sum;
    return 0;
}

/* Drop the sampled indices marked in `leaving` (one flag per sampled index, or NULL and the one index `only`)
 * from the shadows: their entries go (and from a probation shadow's queue and ghost list), and what a shadow
 * holds is summed again in the order it came in (as sum() over a dict of residents adds it) -- by every shadow
 * if `all`, else by those that held a dropped one. */
static int
drop_from_shadows(Kernel *self, const char *leaving, Py_ssize_t only, int all)
{
    for (int c = 0; c < self->ns; c++) {
        Shadow *shadow = &self->shadows[c];
        Py_ssize_t kept = 0;
        for (Py_ssize_t i = 0; i < shadow->n; i++) {
            Py_ssize_t s = shadow->heap[i].s;
            if (leaving ? leaving[s] : s == only)
                CELL(self, s, c)->size = OUT;
            else
                shadow->heap[kept++] = shadow->heap[i];
        }
        int changed = kept != shadow->n;
        if (shadow->layout == LIRS)
            lirs_compact(self, shadow);
        if (shadow->layout >= PROBATION) {
            changed |= ring_filter(self, c, &shadow->queue, leaving, only, leaves_queue);
            changed |= ring_filter(self, c, &shadow->ghost, leaving, only, leaves_ghost);
        }
        if (!changed && !all)
            continue;
        shadow->n = kept;
        shadow_heapify(self, shadow->heap, shadow->n);
        if (held_bytes(self, c, &shadow->used) < 0)
            return -1;
        if (shadow->layout >= PROBATION)
            sum_lists(self, shadow, c);
    }
    return self->failed ? -1 : 0;
}

/* -- the sample ------------------------------------------------------------------------------------------ */

/* room for cap sampled indices (cap > s_cap) */
static int
grow_sample(Kernel *self, Py_ssize_t cap)
{
    if (htda_grow((void **)&self->s_slot, cap, sizeof(Py_ssize_t)) < 0
        || htda_grow((void **)&self->s_group, cap, sizeof(PyObject *)) < 0
        || htda_grow((void **)&self->s_tiebreak, cap, sizeof(Tiebreak)) < 0
        || htda_grow((void **)&self->s_free, cap, sizeof(Py_ssize_t)) < 0
        || htda_grow((void **)&self->cells, cap, self->row_size) < 0)
        return -1;
    self->s_cap = cap;
    return 0;
}

static int
join_sample(Kernel *self, PyObject *group, Py_ssize_t slot)
{
    Py_ssize_t s;
    if (self->s_nfree) {
        s = self->s_free[--self->s_nfree];
    }
    else {
        if (self->s_top == self->s_cap && grow_sample(self, self->s_cap ? 2 * self->s_cap : 1024) < 0)
            return -1;
        s = self->s_top++;
    }
    self->s_slot[s] = slot;
    Py_INCREF(group);
    self->s_group[s] = group;
    int overflow = 1; /* (stays 1 for a group that is not an int) */
    long long number = PyLong_CheckExact(group) ? PyLong_AsLongLongAndOverflow(group, &overflow) : 0;
    self->s_tiebreak[s] = (Tiebreak){number, !overflow};
    for (int k = 0; k < self->ns; k++) {
        CELL(self, s, k)->key = KEYS(self, slot)[self->shadows[k].candidate];
        CELL(self, s, k)->size = OUT;
        if (self->shadows[k].xi >= 0)
            *EXTRA(self, s, &self->shadows[k]) = (Extra){0, 0.0, MAIN};
    }
    SLOT(self, slot)->sidx = s;
    self->nsampled++;
    return 0;
}

static void
leave_sample(Kernel *self, Py_ssize_t s)
{
    SLOT(self, self->s_slot[s])->sidx = -1;
    Py_CLEAR(self->s_group[s]);
    self->s_free[self->s_nfree++] = s;
    self->nsampled--;
}

/* Sample half as many groups: those above the new threshold leave the sample and the shadows. */
static int
halve(Kernel *self)
{
    self->sample_rate /= 2;
    if (self->sample_all) {
        self->sample_all = 0;
        self->threshold = (uint64_t)1 << 63;
    }
    else {
        self->threshold >>= 1;
    }
    self->shadow_capacity = self->sample_rate * self->capacity;
    char *leaving = PyMem_Calloc((size_t)self->s_top + 1, 1);
    if (leaving == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t s = 0; s < self->s_top; s++)
        leaving[s] = self->s_group[s] != NULL && !in_sample(self, SLOT(self, self->s_slot[s])->mix);
    int failed = drop_from_shadows(self, leaving, -1, 1);
    for (int c = 0; c < self->ns && !failed; c++)
        failed = evict(self, c, self->shadow_capacity * self->shadows[c].scale);
    for (Py_ssize_t s = 0; s < self->s_top; s++)
        if (leaving[s])
            leave_sample(self, s);
    PyMem_Free(leaving);
    return failed;
}

/* -- an access --------------------------------------------------------------------------------------------- */

/* one access of the sampled group of index s (in slot) through every shadow */
static int
replay_sampled(Kernel *self, Py_ssize_t slot, Py_ssize_t s, double size)
{
    Cell *cells = CELL(self, s, 0);
    const double *before = self->keeps_before ? BEFORE(self, slot) : NULL;
    for (int c = 0; c < self->nlive; c++) {
        Shadow *shadow = &self->shadows[c];
        double capacity = self->shadow_capacity * shadow->scale;
        Cell *cell = &cells[c];
        Extra *extra = shadow->xi < 0 ? NULL : EXTRA(self, s, shadow);
        double old = cell->size;
        if (old != OUT) { /* a hit counts its bytes */
            shadow->hits += size;
            if (old != size) {
                shadow->used += size - old;
                if (extra != NULL && extra->where != MAIN)
                    shadow->queued += size - old;
                cell->size = size;
            }
            if (shadow->layout == LIRS) {
                if (lirs_access(self, c, s, size, old, before, capacity) < 0)
                    return -1;
            }
            else if (extra != NULL && extra->where == QUEUED)
                extra->where = READ_AGAIN;
        }
        else if (size > capacity) {
            continue;
        }
        else if (shadow->layout == LIRS) {
            if (lirs_access(self, c, s, size, old, before, capacity) < 0)
                return -1;
        }
        else if (extra != NULL) { /* a miss of a probation shadow: back from the ghost list to main, or queued */
            if (extra->ghost) {
                shadow->ghosted -= extra->gone;
                extra->ghost = 0;
                if (push(self, shadow, cell->key, s) < 0)
                    return -1;
            }
            else {
                if (fifo_push(&shadow->queue, (Queued){s, 0.0, 0}) < 0)
                    return -1;
                extra->where = QUEUED;
                shadow->queued += size;
            }
            cell->size = size;
            cell->since = shadow->clock++;
            shadow->used += size;
            if (shadow->used > capacity && settle(self, c, capacity) < 0)
                return -1;
        }
        else { /* a miss: the group comes in, the lowest keys go until it fits */
            Entry entry = {cell->key, s};
            if (shadow->used <= capacity && capacity < shadow->used + size && shadow->n
                && entry_lt(self, &entry, &shadow->heap[0]))
                continue; /* the lowest entry: evicting would drop it first and nothing else: it never enters */
            if (shadow->layout == ASKING) { /* it asks its question before anything goes */
                int room = make_room(self, c, size, capacity, 1, before[shadow->candidate]);
                if (room < 0)
                    return -1;
                if (!room)
                    continue;
            }
            if (self->failed || push(self, shadow, entry.key, s) < 0)
                return -1;
            cell->size = size;
            cell->since = shadow->clock++;
            shadow->used += size;
            if (shadow->used > capacity && evict(self, c, capacity) < 0)
                return -1;
        }
    }
    return 0;
}

static const char *const access_names[] = {"group", "t", "weight", "size"};

/* the arguments (group, t, weight=1.0, size=1.0) of access, positional or by name */
static int
access_arguments(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **out)
{
    out[0] = out[1] = out[2] = out[3] = NULL;
    if (nargs > 4) {
        PyErr_Format(PyExc_TypeError, "access() takes at most 4 arguments (%zd given)", nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        out[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        int i = 0;
        while (i < 4 && PyUnicode_CompareWithASCIIString(name, access_names[i]) != 0)
            i++;
        if (i == 4 || out[i] != NULL) {
            PyErr_Format(PyExc_TypeError, i == 4 ? "access() got an unexpected keyword argument '%U'"
                                                 : "access() got multiple values for argument '%U'", name);
            return -1;
        }
        out[i] = args[nargs + k];
    }
    if (out[1] == NULL) {
        PyErr_Format(PyExc_TypeError, "access() missing required argument '%s'", out[0] ? "t" : "group");
        return -1;
    }
    return 0;
}

static int
as_double(PyObject *value, double fallback, double *out)
{
    if (value == NULL) {
        *out = fallback;
        return 0;
    }
    *out = PyFloat_AsDouble(value);
    return *out == -1.0 && PyErr_Occurred() ? -1 : 0;
}

static int
ready(Kernel *self)
{
    if (self->nc == 0 || self->keys == NULL || self->touched == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the adaptive rating is not configured");
        return 0;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the adaptive rating was re-entered while it was updating");
        return 0;
    }
    return 1;
}

static int
record(Kernel *self, PyObject *group, Py_ssize_t *hint, double t, double lw, double size, int touch)
{
    self->now = t;
    double base = t - self->epoch;
    int nc = self->nc, active = self->active;
    Py_ssize_t slot = *hint;
    if (!owns(self, slot, group)) {
        slot = slot_of(self, group);
        if (slot == -2)
            return -1;
    }
    if (slot >= 0) {
        double *row = KEYS(self, slot), was = row[active];
        if (self->keeps_before)
            memcpy(BEFORE(self, slot), row, (size_t)nc * sizeof(double));
        for (int c = 0; c < nc; c++)
            row[c] = add_key(row[c], lw + base * self->inverse[c]);
        sync_cells(self, slot);
        if (row[active] != was && set_active_key(self, group, slot, row[active]) < 0)
            return -1;
    }
    else { /* a new group: its first key at each candidate, no log-add */
        slot = new_slot(self, group);
        if (slot < 0)
            return -1;
        double *row = KEYS(self, slot);
        for (int c = 0; c < nc; c++)
            row[c] = lw + base * self->inverse[c];
        if (set_active_key(self, group, slot, row[active]) < 0)
            return -1;
    }
    *hint = slot;
    if (touch && PySet_Add(self->touched, group) < 0)
        return -1;
    if (self->shadow_capacity == 0.0)
        return 0;
    Py_ssize_t s = SLOT(self, slot)->sidx;
    if (s < 0) {
        if (!in_sample(self, SLOT(self, slot)->mix))
            return 0;
        if (join_sample(self, group, slot) < 0)
            return -1;
        if (self->nsampled > self->max_sampled && halve(self) < 0)
            return -1;
        s = SLOT(self, slot)->sidx;
        if (s < 0)
            return 0;
    }
    if (self->whole_sizes && size != floor(size))
        self->whole_sizes = 0;
    if (replay_sampled(self, slot, s, size) < 0)
        return -1;
    self->sampled++;
    self->round_bytes += size;
    return 1;
}

static PyObject *
take_hits(Kernel *self)
{
    PyObject *hits = PyList_New(self->ns);
    if (hits == NULL)
        return NULL;
    for (int c = 0; c < self->ns; c++) {
        PyObject *value = PyFloat_FromDouble(self->shadows[c].hits);
        if (value == NULL) {
            Py_DECREF(hits);
            return NULL;
        }
        PyList_SET_ITEM(hits, c, value);
        self->shadows[c].hits = 0.0;
    }
    return hits;
}

PyDoc_STRVAR(access_doc,
"access(group, t, weight=1.0, size=1.0)\n--\n\n"
"Record one access of ``group`` at ``t`` worth ``weight`` (> 0); ``size`` (>= 0) is the group's size, in the\n"
"unit of the capacity, for the shadow caches.  Every ``decision_every`` sampled accesses it calls\n"
"``self._decide(hits)`` with the bytes each shadow hit in the round.");

/* One access of group at t worth 2**lw (see record; *slot as there; touch: group joins _touched), then the round's
 * decision if it ended. */
static int
access_at(Kernel *self, PyObject *group, Py_ssize_t *slot, double t, double lw, double size, int touch)
{
    if (!(size >= 0)) {
        PyErr_SetString(PyExc_ValueError, "access size must be >= 0");
        return -1;
    }
    if (!ready(self))
        return -1;
    self->busy = 1;
    int sampled = record(self, group, slot, t, lw, size, touch);
    self->busy = 0;
    if (self->failed) {
        self->failed = 0;
        return -1;
    }
    if (sampled < 0)
        return -1;
    if (sampled && self->sampled >= self->decision_every) {
        PyObject *hits = take_hits(self);
        if (hits == NULL)
            return -1;
        PyObject *done = PyObject_CallMethodOneArg((PyObject *)self, str_decide, hits);
        Py_DECREF(hits);
        if (done == NULL)
            return -1;
        Py_DECREF(done);
    }
    return 0;
}

static PyObject *
Kernel_access(Kernel *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *arg[4];
    double t, weight, size, lw = 0.0;
    if (access_arguments(args, nargs, kwnames, arg) < 0 || as_double(arg[1], 0.0, &t) < 0
        || as_double(arg[2], 1.0, &weight) < 0 || as_double(arg[3], 1.0, &size) < 0)
        return NULL;
    if (weight != 1.0) {
        if (!(weight > 0)) {
            PyErr_SetString(PyExc_ValueError, "access weight must be > 0");
            return NULL;
        }
        lw = log2(weight);
    }
    Py_ssize_t slot = -1;
    if (access_at(self, arg[0], &slot, t, lw, size, 1) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* -- the simulator's way in (htda/_adaptive_api.h) ----------------------------------------------------------- */

static int
api_access(PyObject *kernel, PyObject *group, Py_ssize_t *slot, double t, double size)
{
    return access_at((Kernel *)kernel, group, slot, t, 0.0, size, 0);
}

static int
api_key(PyObject *kernel, PyObject *group, Py_ssize_t slot, double *key)
{
    Kernel *self = (Kernel *)kernel;
    if (!owns(self, slot, group))
        return 0;
    *key = KEYS(self, slot)[self->active]; /* what set_active_key put in _keys */
    return 1;
}

static int
api_layout(PyObject *kernel)
{
    return ((Kernel *)kernel)->layout;
}

static int
api_settled(PyObject *kernel)
{
    return ((Kernel *)kernel)->settled;
}

static const HtdaAdaptiveAPI api = {api_access, api_key, api_layout, api_settled};

PyDoc_STRVAR(c_api_doc,
"_c_api()\n--\n\n"
"A capsule of the C functions the simulator's compiled cache calls instead of access() and keys()[group], or\n"
"None if this class overrides access (its access must then be called).");

static PyObject *
Kernel_c_api(PyObject *self, PyTypeObject *defining_class, PyObject *const *args, Py_ssize_t nargs,
             PyObject *kwnames)
{
    if (nargs || (kwnames && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "_c_api() takes no arguments");
        return NULL;
    }
    PyObject *mine = PyObject_GetAttrString((PyObject *)Py_TYPE(self), "access");
    PyObject *base = mine == NULL ? NULL : PyObject_GetAttrString((PyObject *)defining_class, "access");
    int same = mine == base;
    Py_XDECREF(mine);
    Py_XDECREF(base);
    if (PyErr_Occurred())
        return NULL;
    if (!same)
        Py_RETURN_NONE;
    return PyCapsule_New((void *)&api, HTDA_ADAPTIVE_API_NAME, NULL);
}

/* -- the rest of the policy's operations -------------------------------------------------------------------- */

static void
free_state(Kernel *self)
{
    clear_index(self);
    for (Py_ssize_t s = 0; s < self->s_top; s++)
        Py_CLEAR(self->s_group[s]);
    for (Py_ssize_t slot = 0; slot < self->nslots; slot++)
        Py_CLEAR(SLOT(self, slot)->held);
    PyMem_Free(self->slots);
    self->slots = NULL;
    if (self->shadows) {
        for (int c = 0; c < self->ns; c++) {
            PyMem_Free(self->shadows[c].heap);
            PyMem_Free(self->shadows[c].queue.a);
            PyMem_Free(self->shadows[c].ghost.a);
        }
    }
    PyMem_Free(self->shadows);
    PyMem_Free(self->inverse);
    PyMem_Free(self->free_slots);
    PyMem_Free(self->s_slot);
    PyMem_Free(self->s_group);
    PyMem_Free(self->s_tiebreak);
    self->s_tiebreak = NULL;
    PyMem_Free(self->s_free);
    PyMem_Free(self->cells);
    self->cells = NULL;
    self->shadows = NULL;
    self->inverse = NULL;
    self->free_slots = self->s_slot = self->s_free = NULL;
    self->s_group = NULL;
    self->nc = self->ns = self->nlive = self->keeps_before = 0;
    self->nslots = self->slot_cap = self->nfree = self->free_cap = 0;
    self->s_top = self->s_cap = self->s_nfree = self->nsampled = 0;
}

PyDoc_STRVAR(configure_doc,
"_configure(inverses, active, layouts=(0,), smaller=0.0)\n--\n\n"
"Start empty with one candidate per 1 / half-life of ``inverses``, ``active`` the one whose keys are _keys, and\n"
"a shadow per candidate and layout of ``layouts`` (distinct, of 0 plain, 1 asking, 2 probation), in that order;\n"
"with ``smaller`` (in (0, 1)) one more per layout after them, at ``active``, each ``smaller`` times the size.");

static PyObject *
Kernel_configure(Kernel *self, PyObject *args)
{
    PyObject *inverses, *layout_arg = NULL;
    int active, layouts[4] = {PLAIN}, nl = 1, seen = 0;
    double smaller = 0.0;
    if (!PyArg_ParseTuple(args, "Oi|Od:_configure", &inverses, &active, &layout_arg, &smaller))
        return NULL;
    if (!(smaller >= 0.0 && smaller < 1.0)) {
        PyErr_SetString(PyExc_ValueError, "smaller: the smaller shadows' share of the size, in [0, 1)");
        return NULL;
    }

    if (layout_arg != NULL) {
        PyObject *given = PySequence_Fast(layout_arg, "layouts must be a sequence");
        if (given == NULL)
            return NULL;
        nl = (int)PySequence_Fast_GET_SIZE(given);
        for (int i = 0; i < nl && i < 4; i++) {
            long layout = PyLong_AsLong(PySequence_Fast_GET_ITEM(given, i));
            if (layout < PLAIN || layout > LIRS || seen & (1 << layout)) {
                nl = 0;
                break;
            }
            seen |= 1 << layout;
            layouts[i] = (int)layout;
        }
        Py_DECREF(given);
        if (nl < 1 || nl > 4) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError,
                                "layouts: 1 to 4 distinct of 0 (plain), 1 (asking), 2 (probation), 3 (lirs)");
            return NULL;
        }
    }
    PyObject *seq = PySequence_Fast(inverses, "inverses must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t nc = PySequence_Fast_GET_SIZE(seq);
    if (nc < 1 || nc > 64 || active < 0 || active >= nc || self->busy) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "1 to 64 candidates, one of them active");
        return NULL;
    }
    free_state(self);
    self->inverse = PyMem_Calloc((size_t)nc, sizeof(double));
    self->shadows = PyMem_Calloc(((size_t)nc + (smaller > 0.0)) * (size_t)nl, sizeof(Shadow));
    if (self->inverse == NULL || self->shadows == NULL) {
        Py_DECREF(seq);
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t c = 0; c < nc; c++) {
        self->inverse[c] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, c));
        if (self->inverse[c] == -1.0 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    self->nc = (int)nc;
    self->ns = self->nlive = ((int)nc + (smaller > 0.0)) * nl;
    self->keeps_before = 0;
    self->whole_sizes = 1;
    self->nx = 0;
    for (int k = 0; k < self->ns; k++) {
        int mine = k < nc * nl; /* else one of the smaller shadows, at the active candidate */
        self->shadows[k].candidate = mine ? k % (int)nc : active;
        self->shadows[k].layout = layouts[mine ? k / nc : k - nc * nl];
        self->shadows[k].scale = mine ? 1.0 : smaller;
        self->shadows[k].xi = self->shadows[k].layout >= PROBATION ? self->nx++ : -1;
        self->keeps_before |= self->shadows[k].layout != PLAIN; /* the question, and probation in a placement */
    }
    self->row_size = (size_t)self->ns * sizeof(Cell) + (size_t)self->nx * sizeof(Extra);
    self->slot_size = sizeof(Slot) + (size_t)nc * (self->keeps_before ? 2 : 1) * sizeof(double);
    self->active = active;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(sizeof_doc, "__sizeof__()\n--\n\nBytes of the kernel with the C tables it owns (sys.getsizeof).");

static PyObject *
Kernel_sizeof(Kernel *self, PyObject *Py_UNUSED(ignored))
{
    size_t bytes = (size_t)Py_TYPE(self)->tp_basicsize + (size_t)self->slot_cap * self->slot_size
                   + (self->index.entries ? ((size_t)self->index.mask + 1) * sizeof(IndexEntry) : 0)
                   + (size_t)self->free_cap * sizeof(Py_ssize_t) + (size_t)self->nc * sizeof(double)
                   + (size_t)self->s_cap * (2 * sizeof(Py_ssize_t) + sizeof(PyObject *) + sizeof(Tiebreak)
                                            + self->row_size);
    for (int k = 0; self->shadows != NULL && k < self->ns; k++) {
        const Shadow *shadow = &self->shadows[k];
        bytes += sizeof(Shadow) + (size_t)shadow->cap * sizeof(Entry)
                 + (size_t)(shadow->queue.cap + shadow->ghost.cap) * sizeof(Queued);
    }
    return PyLong_FromSize_t(bytes);
}

PyDoc_STRVAR(reserve_doc,
"_reserve(groups)\n--\n\nRoom for ``groups`` groups' slots, and for as many of them in the sample as it may hold, before\n"
"they grow (a hint: growing copies every slot).");

static PyObject *
Kernel_reserve(Kernel *self, PyObject *arg)
{
    Py_ssize_t groups = PyLong_AsSsize_t(arg);
    if ((groups == -1 && PyErr_Occurred()) || !ready(self))
        return NULL;
    if (groups > self->slot_cap && grow_slots(self, groups) < 0)
        return NULL;
    /* the sample never holds more than max_sampled + 1 groups (one more, and it halves at once) */
    Py_ssize_t sampled = groups < self->max_sampled ? groups : self->max_sampled + 1;
    if (self->ns && sampled > self->s_cap && grow_sample(self, sampled) < 0)
        return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(set_keys_doc,
"_set_keys(group, keys)\n--\n\n"
"Set the keys of ``group`` at every candidate (a new group is added); the active one goes to _keys and the\n"
"group is touched.");

static PyObject *
Kernel_set_keys(Kernel *self, PyObject *args)
{
    PyObject *group, *keys;
    if (!PyArg_ParseTuple(args, "OO:_set_keys", &group, &keys) || !ready(self))
        return NULL;
    PyObject *seq = PySequence_Fast(keys, "keys must be a sequence");
    if (seq == NULL)
        return NULL;
    double row[64];
    int ok = PySequence_Fast_GET_SIZE(seq) == self->nc;
    for (int c = 0; ok && c < self->nc; c++) {
        row[c] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, c));
        ok = !(row[c] == -1.0 && PyErr_Occurred());
    }
    Py_DECREF(seq);
    if (!ok) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "one key per candidate");
        return NULL;
    }
    Py_ssize_t slot = slot_of(self, group);
    if (slot == -1)
        slot = new_slot(self, group);
    if (slot < 0)
        return NULL;
    memcpy(KEYS(self, slot), row, (size_t)self->nc * sizeof(double));
    sync_cells(self, slot);
    if (set_active_key(self, group, slot, row[self->active]) < 0 || PySet_Add(self->touched, group) < 0)
        return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(forget_doc,
"_forget(group)\n--\n\nDrop ``group``: its keys, its place in the sample and in the shadows, its touch.");

static int
forget(Kernel *self, PyObject *group)
{
    Py_ssize_t slot = slot_of(self, group);
    if (slot == -2)
        return -1;
    if (slot >= 0) {
        if (self->nfree == self->free_cap) {
            Py_ssize_t cap = self->free_cap ? 2 * self->free_cap : 64;
            if (htda_grow((void **)&self->free_slots, cap, sizeof(Py_ssize_t)) < 0)
                return -1;
            self->free_cap = cap;
        }
        Py_ssize_t s = SLOT(self, slot)->sidx;
        if (s >= 0) {
            if (drop_from_shadows(self, NULL, s, 0) < 0)
                return -1;
            leave_sample(self, s);
        }
        Slot *record = SLOT(self, slot);
        Py_ssize_t at = -1;
        if (find_slot(self, record->owner, record->mix, &at) != slot) { /* (found by identity: it cannot fail) */
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "lrfu-adaptive's index lost a group");
            return -1;
        }
        index_remove(self, at);
        PyObject *owner = record->owner;
        record->owner = NULL;
        Py_CLEAR(record->held);
        self->free_slots[self->nfree++] = slot;
        Py_DECREF(owner);
    }
    PyObject *gone = PyObject_CallMethod(self->keys, "pop", "OO", group, Py_None);
    if (gone == NULL)
        return -1;
    Py_DECREF(gone);
    return PySet_Discard(self->touched, group) < 0 ? -1 : 0;
}

static PyObject *
Kernel_forget(Kernel *self, PyObject *group)
{
    if (!ready(self))
        return NULL;
    self->busy = 1;
    int failed = forget(self, group);
    self->busy = self->failed = 0;
    if (failed)
        return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(activate_doc,
"_activate(to)\n--\n\nRank with candidate ``to``: _keys (the same dict, in the same order) gets its keys.");

static PyObject *
Kernel_activate(Kernel *self, PyObject *arg)
{
    int to = candidate(self, arg, 0);
    if (to < 0)
        return NULL;
    self->active = to;
    if (self->unmirrored)
        Py_RETURN_NONE;
    self->busy = 1;
    int failed = 0;
    /* _keys holds a float for each group whose slot holds it (the kernel writes both, and forgets both): those
     * slots, taken in order, are _keys' groups without a lookup each (a switch of half-life was a sixth of a
     * replay's time on small caches: P6 at 1 %).  If _keys was changed from Python (another number of groups,
     * or a group's float not its own and the group not in it), each of its keys is looked up instead, and one
     * the kernel does not know is an error. */
    Py_ssize_t written = 0;
    for (Py_ssize_t slot = 0; slot < self->nslots; slot++)
        written += SLOT(self, slot)->owner != NULL && SLOT(self, slot)->held != NULL;
    int looked_up = written != PyDict_GET_SIZE(self->keys);
    for (Py_ssize_t slot = 0; slot < self->nslots && !failed && !looked_up; slot++) {
        Slot *record = SLOT(self, slot);
        if (record->owner == NULL || record->held == NULL)
            continue;
        if (Py_REFCNT(record->held) != 2) { /* replaced in _keys, or held by a reader too: is its group there? */
            int there = PyDict_Contains(self->keys, record->owner);
            failed = there < 0;
            looked_up = there == 0;
            if (there <= 0)
                continue;
        }
        failed = set_active_key(self, record->owner, slot, record->keys[to]) < 0; /* new values: allowed */
    }
    if (looked_up && !failed) {
        Py_ssize_t pos = 0;
        PyObject *group, *value;
        while (!failed && PyDict_Next(self->keys, &pos, &group, &value)) {
            Py_ssize_t slot = slot_of(self, group);
            if (slot < 0 && !PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "a key the adaptive rating does not know");
            failed = slot < 0 || set_active_key(self, group, slot, KEYS(self, slot)[to]) < 0;
        }
    }
    self->busy = 0;
    if (failed)
        return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(retire_doc,
"_retire(first)\n--\n\nEmpty the shadows from index ``first`` on (>= 1) and replay them no more: their hits are 0 from\n"
"now on.");

static PyObject *
Kernel_retire(Kernel *self, PyObject *arg)
{
    Py_ssize_t first = PyLong_AsSsize_t(arg);
    if ((first == -1 && PyErr_Occurred()) || !ready(self))
        return NULL;
    if (first < 1 || first > self->ns) {
        PyErr_SetString(PyExc_ValueError, "no such shadow");
        return NULL;
    }
    for (int k = (int)first; k < self->nlive; k++) {
        Shadow *shadow = &self->shadows[k];
        for (Py_ssize_t s = 0; s < self->s_top; s++) {
            CELL(self, s, k)->size = OUT;
            if (shadow->xi >= 0)
                *EXTRA(self, s, shadow) = (Extra){0, 0.0, MAIN};
        }
        PyMem_Free(shadow->heap);
        PyMem_Free(shadow->queue.a);
        PyMem_Free(shadow->ghost.a);
        shadow->heap = NULL;
        shadow->n = shadow->cap = 0;
        shadow->queue = shadow->ghost = (Ring){0};
        shadow->used = shadow->hits = shadow->queued = shadow->ghosted = 0.0;
    }
    if (first < self->nlive)
        self->nlive = (int)first;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(evict_doc, "_evict(capacity)\n--\n\nEvict from every shadow down to its share of ``capacity``.");

static PyObject *
Kernel_evict(Kernel *self, PyObject *arg)
{
    double capacity = PyFloat_AsDouble(arg);
    if ((capacity == -1.0 && PyErr_Occurred()) || !ready(self))
        return NULL;
    int failed = 0;
    self->busy = 1;
    for (int c = 0; c < self->ns && !failed; c++)
        failed = evict(self, c, capacity * self->shadows[c].scale);
    self->busy = self->failed = 0;
    if (failed)
        return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(table_doc, "table(candidate)\n--\n\nA new dict of every group's key at ``candidate``, in _keys' order\n"
"(without mirror_keys: in the order of the kernel's slots).");

/* a new dict of every group's key at candidate c, in the order of the slots (when _keys is not kept) */
static PyObject *
table_of_slots(Kernel *self, int c)
{
    PyObject *table = PyDict_New();
    for (Py_ssize_t slot = 0; table != NULL && slot < self->nslots; slot++) {
        Slot *record = SLOT(self, slot);
        if (record->owner == NULL)
            continue;
        PyObject *key = PyFloat_FromDouble(record->keys[c]);
        if (key == NULL || PyDict_SetItem(table, record->owner, key) < 0)
            Py_CLEAR(table);
        Py_XDECREF(key);
    }
    return table;
}

static PyObject *
Kernel_table(Kernel *self, PyObject *arg)
{
    int c = candidate(self, arg, 0);
    if (c < 0)
        return NULL;
    if (self->unmirrored)
        return table_of_slots(self, c);
    PyObject *table = PyDict_New();
    Py_ssize_t pos = 0;
    PyObject *group, *value;
    while (table != NULL && PyDict_Next(self->keys, &pos, &group, &value)) {
        Py_ssize_t slot = slot_of(self, group);
        PyObject *key = slot >= 0 ? PyFloat_FromDouble(KEYS(self, slot)[c]) : NULL;
        if (key == NULL || PyDict_SetItem(table, group, key) < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "a key the adaptive rating does not know");
            Py_XDECREF(key);
            Py_CLEAR(table);
            break;
        }
        Py_DECREF(key);
    }
    return table;
}

PyDoc_STRVAR(shadow_doc,
"shadow(index)\n--\n\n(held, used, hits) of shadow ``index`` (candidate index % candidates, layout the index-th\n"
"of the layouts): a new dict of the groups it holds (queued ones too) -> their size, in the order they came in,\n"
"the size it holds and the bytes it hit in the current round.");

static PyObject *
Kernel_shadow(Kernel *self, PyObject *arg)
{
    int c = candidate(self, arg, 1);
    if (c < 0)
        return NULL;
    Py_ssize_t n;
    Arrival *order = arrivals(self, c, &n);
    if (order == NULL)
        return NULL;
    PyObject *held = PyDict_New();
    for (Py_ssize_t i = 0; held && i < n; i++) {
        PyObject *size = PyFloat_FromDouble(CELL(self, order[i].s, c)->size);
        if (size == NULL || PyDict_SetItem(held, self->s_group[order[i].s], size) < 0)
            Py_CLEAR(held);
        Py_XDECREF(size);
    }
    PyMem_Free(order);
    if (held == NULL)
        return NULL;
    return Py_BuildValue("(Ndd)", held, self->shadows[c].used, self->shadows[c].hits);
}

PyDoc_STRVAR(before_doc,
"before(group)\n--\n\nThe key ``group`` had at the active candidate before its latest access (-inf if it was accessed\n"
"once, or is unknown); ValueError when every shadow is plain.");

/* group's key at the active candidate, now or (`before`) before its latest access; -inf if it is unknown */
static PyObject *
active_key_of(Kernel *self, PyObject *group, int before)
{
    Py_ssize_t slot = slot_of(self, group);
    if (slot == -2)
        return NULL;
    return PyFloat_FromDouble(slot < 0 ? -INFINITY : (before ? BEFORE(self, slot) : KEYS(self, slot))[self->active]);
}

static PyObject *
Kernel_before(Kernel *self, PyObject *group)
{
    if (!ready(self))
        return NULL;
    if (!self->keeps_before) {
        PyErr_SetString(PyExc_ValueError,
                        "keys before the latest access are kept only with asking, probation or lirs shadows");
        return NULL;
    }
    return active_key_of(self, group, 1);
}

PyDoc_STRVAR(key_doc,
"key(group)\n--\n\nThe time-invariant ordering key of ``group`` at the active candidate (-inf if it is unknown),\n"
"from the kernel's own table: keys()[group] while mirror_keys.");

static PyObject *
Kernel_key(Kernel *self, PyObject *group)
{
    if (self->busy && !self->unmirrored && self->keys != NULL) {
        /* read from another thread while this kernel updates (a finalizer it set off ran Python): the slots may be
         * half-changed, _keys is read as the coordinator's readers always read it */
        PyObject *key = PyDict_GetItemWithError(self->keys, group);
        if (key != NULL)
            return Py_NewRef(key);
        return PyErr_Occurred() ? NULL : PyFloat_FromDouble(-INFINITY);
    }
    return ready(self) ? active_key_of(self, group, 0) : NULL;
}

PyDoc_STRVAR(knows_doc, "_knows(group)\n--\n\nWhether the kernel keeps keys of ``group``.");

static PyObject *
Kernel_knows(Kernel *self, PyObject *group)
{
    Py_ssize_t slot = slot_of(self, group);
    if (slot == -2)
        return NULL;
    return PyBool_FromLong(slot >= 0);
}

PyDoc_STRVAR(sample_doc, "sampled()\n--\n\nThe groups whose accesses the shadow caches replay (a new set).");

static PyObject *
Kernel_sample(Kernel *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *groups = PySet_New(NULL);
    for (Py_ssize_t s = 0; groups && s < self->s_top; s++)
        if (self->s_group[s] != NULL && PySet_Add(groups, self->s_group[s]) < 0)
            Py_CLEAR(groups);
    return groups;
}

static PyMethodDef Kernel_methods[] = {
    {"access", (PyCFunction)(void (*)(void))Kernel_access, METH_FASTCALL | METH_KEYWORDS, access_doc},
    {"_configure", (PyCFunction)Kernel_configure, METH_VARARGS, configure_doc},
    {"_reserve", (PyCFunction)Kernel_reserve, METH_O, reserve_doc},
    {"__sizeof__", (PyCFunction)Kernel_sizeof, METH_NOARGS, sizeof_doc},
    {"_set_keys", (PyCFunction)Kernel_set_keys, METH_VARARGS, set_keys_doc},
    {"_forget", (PyCFunction)Kernel_forget, METH_O, forget_doc},
    {"_activate", (PyCFunction)Kernel_activate, METH_O, activate_doc},
    {"_evict", (PyCFunction)Kernel_evict, METH_O, evict_doc},
    {"_retire", (PyCFunction)Kernel_retire, METH_O, retire_doc},
    {"table", (PyCFunction)Kernel_table, METH_O, table_doc},
    {"shadow", (PyCFunction)Kernel_shadow, METH_O, shadow_doc},
    {"sampled", (PyCFunction)Kernel_sample, METH_NOARGS, sample_doc},
    {"before", (PyCFunction)Kernel_before, METH_O, before_doc},
    {"key", (PyCFunction)Kernel_key, METH_O, key_doc},
    {"_knows", (PyCFunction)Kernel_knows, METH_O, knows_doc},
    {"_c_api", (PyCFunction)(void (*)(void))Kernel_c_api, METH_METHOD | METH_FASTCALL | METH_KEYWORDS, c_api_doc},
    {NULL, NULL, 0, NULL},
};

/* -- attributes --------------------------------------------------------------------------------------------- */

static PyMemberDef Kernel_members[] = {
    {"epoch", T_DOUBLE, offsetof(Kernel, epoch), 0, "the time keys are relative to"},
    {"_now", T_DOUBLE, offsetof(Kernel, now), 0, "the latest access time seen"},
    {"active", T_INT, offsetof(Kernel, active), READONLY, "the index of the active candidate"},
    {"sample_rate", T_DOUBLE, offsetof(Kernel, sample_rate), 0, "the share of the hash space sampled"},
    {"max_sampled", T_PYSSIZET, offsetof(Kernel, max_sampled), 0, "the most groups sampled"},
    {"capacity", T_DOUBLE, offsetof(Kernel, capacity), 0, "the real cache's size"},
    {"_shadow_capacity", T_DOUBLE, offsetof(Kernel, shadow_capacity), 0, "each shadow's size (0: no shadows)"},
    {"_sampled", T_PYSSIZET, offsetof(Kernel, sampled), 0, "sampled accesses in the current round"},
    {"_round_bytes", T_DOUBLE, offsetof(Kernel, round_bytes), 0, "their sizes"},
    {"decision_every", T_PYSSIZET, offsetof(Kernel, decision_every), 0, "sampled accesses per round"},
    {"settled", T_BOOL, offsetof(Kernel, settled), 0,
     "on probation, whether the cache should put the files it holds that were read once on probation too"},
    {NULL, 0, 0, 0, NULL},
};

static PyObject *
get_object(Kernel *self, void *closure)
{
    PyObject *value = closure ? self->touched : self->keys;
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, closure ? "_touched" : "_keys");
        return NULL;
    }
    return Py_NewRef(value);
}

static int
set_object(Kernel *self, PyObject *value, void *closure)
{
    if (value == NULL || (closure ? !PySet_CheckExact(value) : !PyDict_CheckExact(value))) {
        PyErr_SetString(PyExc_TypeError, closure ? "_touched must be a set" : "_keys must be a dict");
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the adaptive rating was re-entered while it was updating");
        return -1;
    }
    Py_XSETREF(*(closure ? &self->touched : &self->keys), Py_NewRef(value));
    return 0;
}

static PyObject *
get_salt(Kernel *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(self->sample_salt);
}

/* value (an attribute `name` is set to) as an unsigned 64-bit int in *out; -1 with TypeError if it is no int, or
 * the conversion's error (OverflowError: negative, or 2**64 or more) */
static int
uint64_of(PyObject *value, const char *name, unsigned long long *out)
{
    if (value == NULL || !PyLong_Check(value)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int", name);
        return -1;
    }
    *out = PyLong_AsUnsignedLongLong(value);
    return *out == (unsigned long long)-1 && PyErr_Occurred() ? -1 : 0;
}

static int
set_salt(Kernel *self, PyObject *value, void *Py_UNUSED(closure))
{
    unsigned long long salt;
    if (uint64_of(value, "_sample_salt", &salt) < 0)
        return -1;
    if (self->index.count && salt != self->sample_salt) { /* the index finds groups by their mixed hashes */
        PyErr_SetString(PyExc_ValueError, "_sample_salt is set before the first group is keyed");
        return -1;
    }
    self->sample_salt = salt;
    return 0;
}

static PyObject *
get_threshold(Kernel *self, void *Py_UNUSED(closure))
{
    if (!self->sample_all)
        return PyLong_FromUnsignedLongLong(self->threshold);
    PyObject *one = PyLong_FromLong(1), *shift = PyLong_FromLong(64), *all = NULL;
    if (one && shift)
        all = PyNumber_Lshift(one, shift);
    Py_XDECREF(one);
    Py_XDECREF(shift);
    return all;
}

static int
set_threshold(Kernel *self, PyObject *value, void *Py_UNUSED(closure))
{
    unsigned long long threshold;
    if (uint64_of(value, "_threshold", &threshold) < 0) { /* 2**64 (a rate of 1) or more: all */
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
        self->sample_all = 1;
        self->threshold = 0;
        return 0;
    }
    self->sample_all = 0;
    self->threshold = threshold;
    return 0;
}

static PyObject *
get_nsampled(Kernel *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->nsampled);
}

static PyObject *
get_layout(Kernel *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLong(self->layout);
}

static int
set_layout(Kernel *self, PyObject *value, void *Py_UNUSED(closure))
{
    long layout = value == NULL ? -1 : PyLong_AsLong(value);
    if (layout < PLAIN || layout > LIRS) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "layout must be 0 (plain), 1 (asking), 2 (probation) or 3 (lirs)");
        }
        return -1;
    }
    self->layout = (int)layout;
    return 0;
}

static PyObject *
get_groups(Kernel *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->index.count);
}

static PyObject *
get_mirror(Kernel *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(!self->unmirrored);
}

/* mirror_keys = False empties _keys and lets every slot's float go; True fills _keys again, in the slots' order */
static int
set_mirror(Kernel *self, PyObject *value, void *Py_UNUSED(closure))
{
    int mirror = value == NULL ? -1 : PyObject_IsTrue(value);
    if (mirror < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "mirror_keys cannot be deleted");
        return -1;
    }
    if (!ready(self) || mirror == !self->unmirrored)
        return PyErr_Occurred() ? -1 : 0;
    for (Py_ssize_t slot = 0; slot < self->nslots; slot++)
        Py_CLEAR(SLOT(self, slot)->held);
    PyDict_Clear(self->keys);
    self->unmirrored = !mirror;
    for (Py_ssize_t slot = 0; mirror && slot < self->nslots; slot++) {
        Slot *record = SLOT(self, slot);
        if (record->owner != NULL && set_active_key(self, record->owner, slot, record->keys[self->active]) < 0)
            return -1;
    }
    return 0;
}

static PyGetSetDef Kernel_getset[] = {
    {"mirror_keys", (getter)get_mirror, (setter)set_mirror,
     "whether _keys (keys()) holds each group's active key, as the coordinator reads them (default True); False\n"
     "empties it, and the keys are read through key() and table() only: the simulator's compiled cache, which\n"
     "reads them from the kernel, saves a float written an access and every group's at a switch of half-life", NULL},
    {"groups", (getter)get_groups, NULL, "how many groups the kernel keeps keys of", NULL},
    {"layout", (getter)get_layout, (setter)set_layout,
     "how the cache around the rating should lay itself out now: 0 plain, 1 asking, 2 probation", NULL},
    {"_keys", (getter)get_object, (setter)set_object, "the active candidate's keys (a dict)", NULL},
    {"_touched", (getter)get_object, (setter)set_object, "groups accessed since take_touched (a set)", (void *)1},
    {"_threshold", (getter)get_threshold, (setter)set_threshold, "sampled: mixed hash below this", NULL},
    {"_sample_salt", (getter)get_salt, (setter)set_salt,
     "xor-ed into each group's hash before it is mixed (set before the first group is keyed)", NULL},
    {"sampled_groups", (getter)get_nsampled, NULL, "how many groups the shadow caches sample now (at most max_sampled)",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* -- the type ----------------------------------------------------------------------------------------------- */

static PyObject *
Kernel_new(PyTypeObject *type, PyObject *Py_UNUSED(args), PyObject *Py_UNUSED(kwargs))
{
    Kernel *self = (Kernel *)type->tp_alloc(type, 0); /* zeroed: nothing configured yet */
    if (self != NULL) {
        self->sample_all = 1;
        self->sample_rate = 1.0;
        self->max_sampled = PY_SSIZE_T_MAX;
        self->decision_every = PY_SSIZE_T_MAX;
    }
    return (PyObject *)self;
}

static int
Kernel_traverse(Kernel *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->keys);
    Py_VISIT(self->touched);
    for (Py_ssize_t slot = 0; self->slots != NULL && slot < self->nslots; slot++)
        Py_VISIT(SLOT(self, slot)->owner);
    for (Py_ssize_t s = 0; s < self->s_top; s++)
        Py_VISIT(self->s_group[s]);
    return 0;
}

static int
Kernel_clear(Kernel *self)
{
    Py_CLEAR(self->keys);
    Py_CLEAR(self->touched);
    clear_index(self);
    for (Py_ssize_t s = 0; s < self->s_top; s++)
        Py_CLEAR(self->s_group[s]);
    return 0;
}

static void
Kernel_dealloc(Kernel *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Kernel_clear(self);
    free_state(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyType_Slot Kernel_slots[] = {
    {Py_tp_doc, "The keys and shadow caches of lrfu-adaptive: the base of AdaptiveLRFUPolicy."},
    {Py_tp_new, Kernel_new},
    {Py_tp_dealloc, Kernel_dealloc},
    {Py_tp_traverse, Kernel_traverse},
    {Py_tp_clear, Kernel_clear},
    {Py_tp_methods, Kernel_methods},
    {Py_tp_members, Kernel_members},
    {Py_tp_getset, Kernel_getset},
    {0, NULL},
};

static PyType_Spec Kernel_spec = {
    .name = "htda.coordinator._adaptive.Kernel",
    .basicsize = sizeof(Kernel),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = Kernel_slots,
};

static int
module_constants(void)
{
    str_decide = PyUnicode_InternFromString("_decide");
    return str_decide == NULL ? -1 : 0;
}

HTDA_MODULE(_adaptive, "htda.coordinator._adaptive", "The hot path of lrfu-adaptive (htda.coordinator.adaptive) in C.",
            Kernel_spec, "Kernel", module_constants)
