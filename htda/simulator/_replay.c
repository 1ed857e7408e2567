/* htda.simulator._replay: the per-request loop of HTDAPolicy.replay (htda/simulator/htda_policy.py) in C.
 *
 * The loop is the simulator's hot path: in Python it cost about 3 us a request on the ARC traces, three times
 * the adaptive rating it drives.  Here it runs the same steps on the same objects: the policy's dicts (file ->
 * group, file -> groups, group -> last access, cached file -> key of its heap entry, cached file -> size, group
 * -> bytes) and its heap, a Python list of (key, file) tuples ordered exactly as heapq orders it.  So nothing
 * the Python side reads changes form: the policy's file_key() and the re-keying after a switch of an adaptive
 * rating (Python, called back from inside rating.access) work on the tables this loop fills, and the decisions
 * are those of the Python loop the tests keep as a reference (tests/simulator/test_compiled.py).
 *
 * What makes it fast is only that no bytecode runs per request: dict and set operations are the C API's,
 * (key, file) comparisons read the doubles and ints directly, and the rating is called once per access
 * through vectorcall.  Byte counts are 64-bit integers (checked): a chunk's totals fit by far. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* htda.simulator.trace.NO_GROUP: a request without a group is its own group, -2 - its file id */
#define NO_GROUP (-1)

typedef struct {
    PyObject_HEAD
    /* the policy's tables (see HTDAPolicy.__init__), shared: the loop reads and writes them in place */
    PyObject *group_of; /* file -> the group it was first requested in */
    PyObject *more_groups; /* file -> set of all its groups, for files in several groups */
    PyObject *last_access; /* group -> time of its last recorded access */
    PyObject *entry_key; /* cached file -> key of its one live heap entry */
    PyObject *sizes; /* cached file -> size */
    PyObject *heap; /* list of (key, file), a heapq heap, lazy: entries may hold an older (lower) key */
    PyObject *group_bytes; /* group -> bytes of the files first requested in it, or None: no sizes to the rating */
    PyObject *rating; /* the RatingPolicy: access() and keys() */
    PyObject *file_key; /* the policy's file_key(file): a file's key when it is not simply its group's */
    long long capacity;
    int per_job; /* one access per group and timestamp (accesses="job"), else one per request */
    int fast; /* not per size: a file of one group has its group's key, read from keys() directly */
} Loop;

/* What one replay call adds up (the policy keeps the running totals). */
typedef struct {
    long long hits, hit_bytes, staged, evicted, used;
} Totals;

/* The objects one replay call works with besides the tables. */
typedef struct {
    PyObject *keys; /* rating.keys(): group -> its key (the same dict throughout, updated in place) */
    PyObject *access; /* rating.access */
} Rating;

static PyObject *unit_weight; /* 1.0: the weight of an access */
static PyObject *zero_bytes; /* 0: the size of a group no file was first requested in */

/* -- comparisons, as Python's operators make them ---------------------------------------------------------- */

/* a != b (1, 0, or -1 with an exception); floats and small ints without a round trip through objects */
static int
differ(PyObject *a, PyObject *b)
{
    if (PyFloat_CheckExact(a) && PyFloat_CheckExact(b))
        return PyFloat_AS_DOUBLE(a) != PyFloat_AS_DOUBLE(b);
    if (PyLong_CheckExact(a) && PyLong_CheckExact(b)) {
        int overflow_a, overflow_b;
        long long x = PyLong_AsLongLongAndOverflow(a, &overflow_a);
        long long y = PyLong_AsLongLongAndOverflow(b, &overflow_b);
        if (!overflow_a && !overflow_b)
            return x != y;
    }
    return PyObject_RichCompareBool(a, b, Py_NE); /* -1 on error */
}

/* a < b for two ints (the files of two entries; comparing ints runs no Python code) */
static int
less(PyObject *a, PyObject *b)
{
    if (PyLong_CheckExact(a) && PyLong_CheckExact(b)) {
        int overflow_a, overflow_b;
        long long x = PyLong_AsLongLongAndOverflow(a, &overflow_a);
        long long y = PyLong_AsLongLongAndOverflow(b, &overflow_b);
        if (!overflow_a && !overflow_b)
            return x < y;
    }
    return PyObject_RichCompareBool(a, b, Py_LT);
}

/* whether entry is a (float key, int file) tuple: the only entries the loop makes, and HTDAPolicy's re-keying */
static int
well_formed(PyObject *entry)
{
    return PyTuple_CheckExact(entry) && PyTuple_GET_SIZE(entry) == 2 && PyFloat_Check(PyTuple_GET_ITEM(entry, 0))
           && PyLong_Check(PyTuple_GET_ITEM(entry, 1));
}

/* (key, file) entry a < entry b, as Python compares tuples: by key, and by file when the keys are equal (1, 0,
 * or -1 with an exception).  No Python code runs (so the heap cannot change under a sift). */
static int
entry_lt(PyObject *a, PyObject *b)
{
    if (!well_formed(a) || !well_formed(b)) {
        PyErr_SetString(PyExc_TypeError, "HTDA's eviction heap holds (float key, int file) tuples only");
        return -1;
    }
    PyObject *ka = PyTuple_GET_ITEM(a, 0), *kb = PyTuple_GET_ITEM(b, 0);
    if (ka != kb && PyFloat_AS_DOUBLE(ka) != PyFloat_AS_DOUBLE(kb)) /* the first items differ: they decide */
        return PyFloat_AS_DOUBLE(ka) < PyFloat_AS_DOUBLE(kb);
    PyObject *fa = PyTuple_GET_ITEM(a, 1), *fb = PyTuple_GET_ITEM(b, 1);
    return fa == fb ? 0 : less(fa, fb); /* equal tuples are not less */
}

/* -- the heap: heapq's algorithm (Modules/_heapq.c), so the list is the one heapq would build ---------------- */

/* heapq._siftdown: the item at pos moves up towards start while it is less than its parent */
static int
sift_towards_root(PyObject *heap, Py_ssize_t start, Py_ssize_t pos)
{
    PyObject **items = ((PyListObject *)heap)->ob_item, *item = items[pos];
    int lt = 0;
    while (pos > start) {
        Py_ssize_t parent = (pos - 1) >> 1;
        if ((lt = entry_lt(item, items[parent])) <= 0)
            break;
        items[pos] = items[parent];
        pos = parent;
    }
    items[pos] = item; /* also on an error: the list stays a permutation of its entries */
    return lt < 0 ? -1 : 0;
}

/* heapq._siftup: the item at pos goes down to a leaf along the smaller children, then back up to its place */
static int
sift_towards_leaves(PyObject *heap, Py_ssize_t pos)
{
    PyObject **items = ((PyListObject *)heap)->ob_item, *item = items[pos];
    Py_ssize_t end = PyList_GET_SIZE(heap), start = pos, child = 2 * pos + 1;
    while (child < end) {
        if (child + 1 < end) {
            int lt = entry_lt(items[child], items[child + 1]);
            if (lt < 0) {
                items[pos] = item; /* the list stays a permutation of its entries */
                return -1;
            }
            child += !lt;
        }
        items[pos] = items[child];
        pos = child;
        child = 2 * pos + 1;
    }
    items[pos] = item;
    return sift_towards_root(heap, start, pos);
}

/* heapq.heappush(heap, (key, file)) */
static int
heap_push(PyObject *heap, PyObject *key, PyObject *file)
{
    PyObject *entry = PyTuple_Pack(2, key, file);
    if (entry == NULL)
        return -1;
    int failed = PyList_Append(heap, entry);
    Py_DECREF(entry);
    return failed ? -1 : sift_towards_root(heap, 0, PyList_GET_SIZE(heap) - 1);
}

/* heapq.heappop(heap): a new reference to the least entry (the heap is not empty) */
static PyObject *
heap_pop(PyObject *heap)
{
    Py_ssize_t n = PyList_GET_SIZE(heap);
    PyObject **items = ((PyListObject *)heap)->ob_item, *last = items[n - 1], *top = items[0];
    Py_INCREF(last);
    if (PyList_SetSlice(heap, n - 1, n, NULL) < 0) { /* drops the list's reference to last */
        Py_DECREF(last);
        return NULL;
    }
    if (n == 1)
        return last;
    items = ((PyListObject *)heap)->ob_item; /* the slice may have moved the array */
    items[0] = last; /* the list's reference to top becomes the caller's; ours to last, the list's */
    if (sift_towards_leaves(heap, 0) < 0) {
        Py_DECREF(top);
        return NULL;
    }
    return top;
}

/* -- small helpers ------------------------------------------------------------------------------------------- */

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
as_bytes(PyObject *value, long long *out)
{
    *out = PyLong_AsLongLong(value);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* the file's current key (a new reference): its group's key from keys(), as the Python loop's fast path
 * reads it, or the policy's file_key() (several groups, or keys per byte) */
static PyObject *
current_key(Loop *self, Rating *rating, PyObject *file, PyObject *group)
{
    PyObject *key;
    if (group != NULL) {
        key = PyDict_GetItemWithError(rating->keys, group);
        if (key == NULL && !PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, group);
        Py_XINCREF(key);
    }
    else {
        key = PyObject_CallOneArg(self->file_key, file);
    }
    if (key != NULL && !PyFloat_Check(key)) { /* (what makes comparing entries safe and cheap) */
        PyErr_Format(PyExc_TypeError, "a rating's keys must be floats, not %.100s", Py_TYPE(key)->tp_name);
        Py_CLEAR(key);
    }
    return key;
}

/* the group whose key is the file's (a borrowed reference), or NULL when the key needs file_key(): the
 * fast path's condition (not per size, a file of one group) */
static PyObject *
keyed_group(Loop *self, PyObject *file, PyObject *known, int *failed)
{
    if (!self->fast)
        return NULL;
    int several = PyDict_Contains(self->more_groups, file);
    if (several < 0)
        *failed = 1;
    return several ? NULL : known;
}

/* -- the steps of a request ---------------------------------------------------------------------------------- */

/* The file's groups (first one, others) and its first group's bytes; *known gets the group it was first
 * requested in (a borrowed reference, held by group_of). */
static int
note_group(Loop *self, PyObject *file, PyObject *group, long long size, PyObject **known)
{
    *known = PyDict_GetItemWithError(self->group_of, file);
    if (*known == NULL) { /* a new file: its group's size grows by it */
        if (PyErr_Occurred() || PyDict_SetItem(self->group_of, file, group) < 0)
            return -1;
        *known = group;
        if (self->group_bytes == Py_None)
            return 0;
        PyObject *before = PyDict_GetItemWithError(self->group_bytes, group);
        long long bytes = 0;
        if ((before == NULL && PyErr_Occurred()) || (before != NULL && as_bytes(before, &bytes) < 0)
            || add_checked(&bytes, size) < 0)
            return -1;
        PyObject *after = PyLong_FromLongLong(bytes);
        int failed = after == NULL || PyDict_SetItem(self->group_bytes, group, after) < 0;
        Py_XDECREF(after);
        return failed ? -1 : 0;
    }
    int other = differ(*known, group);
    if (other <= 0)
        return other;
    /* more_groups.setdefault(file, {known}).add(group) */
    PyObject *groups = PyDict_GetItemWithError(self->more_groups, file);
    if (groups == NULL) {
        if (PyErr_Occurred() || (groups = PySet_New(NULL)) == NULL)
            return -1;
        int failed = PySet_Add(groups, *known) < 0 || PyDict_SetItem(self->more_groups, file, groups) < 0;
        Py_DECREF(groups); /* the dict holds it */
        if (failed)
            return -1;
    }
    return PySet_Add(groups, group);
}

/* Record the access of group at t with the rating, unless (one access per job) the group was already
 * accessed at t. */
static int
record_access(Loop *self, Rating *rating, PyObject *group, PyObject *t)
{
    if (self->per_job) {
        PyObject *last = PyDict_GetItemWithError(self->last_access, group);
        if (last == NULL && PyErr_Occurred())
            return -1;
        if (last != NULL) {
            int moved = differ(last, t);
            if (moved <= 0)
                return moved;
        }
    }
    if (PyDict_SetItem(self->last_access, group, t) < 0)
        return -1;
    PyObject *args[4] = {group, t, NULL, NULL};
    Py_ssize_t nargs = 2;
    if (self->group_bytes != Py_None) { /* access(group, t, 1.0, group_bytes.get(group, 0)) */
        args[2] = unit_weight;
        args[3] = PyDict_GetItemWithError(self->group_bytes, group);
        if (args[3] == NULL && PyErr_Occurred())
            return -1;
        if (args[3] == NULL) /* no file was first requested in this group: it has no bytes of its own */
            args[3] = zero_bytes;
        nargs = 4;
    }
    PyObject *done = PyObject_Vectorcall(rating->access, args, nargs, NULL);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
}

/* The victim leaves the cache's tables; *size gets its size. */
static int
uncache(Loop *self, PyObject *victim, long long *size)
{
    PyObject *held = PyDict_GetItemWithError(self->sizes, victim);
    if (held == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, victim);
        return -1;
    }
    if (as_bytes(held, size) < 0 || PyDict_DelItem(self->entry_key, victim) < 0)
        return -1;
    return PyDict_DelItem(self->sizes, victim);
}

/* Evict lowest keys first until the cache fits.  An entry whose key went stale (its group was accessed since
 * it was pushed) is pushed again with the key it has now.  If the victim is the file just staged, it was not
 * admitted: *staged becomes 0. */
static int
make_room(Loop *self, Rating *rating, Totals *totals, PyObject *staged_file, long long *staged)
{
    while (totals->used > self->capacity) {
        PyObject *entry = heap_pop(self->heap);
        if (entry == NULL)
            return -1;
        PyObject *key = PyTuple_GET_ITEM(entry, 0), *victim = PyTuple_GET_ITEM(entry, 1);
        int failed = 0;
        PyObject *group = NULL;
        if (self->fast) {
            group = PyDict_GetItemWithError(self->group_of, victim);
            if (group == NULL && !PyErr_Occurred())
                PyErr_SetObject(PyExc_KeyError, victim);
            failed = group == NULL;
            if (!failed)
                group = keyed_group(self, victim, group, &failed);
        }
        PyObject *current = failed ? NULL : current_key(self, rating, victim, group);
        int stale = current == NULL ? -1 : differ(current, key);
        if (stale != 0) {
            failed = stale < 0 || PyDict_SetItem(self->entry_key, victim, current) < 0
                     || heap_push(self->heap, current, victim) < 0;
            Py_XDECREF(current);
            Py_DECREF(entry);
            if (failed)
                return -1;
            continue;
        }
        Py_DECREF(current);
        long long victim_size;
        int is_staged = -1;
        if (uncache(self, victim, &victim_size) == 0)
            is_staged = !differ(victim, staged_file);
        Py_DECREF(entry);
        if (is_staged < 0 || PyErr_Occurred())
            return -1;
        totals->used -= victim_size;
        if (is_staged)
            *staged = 0; /* not admitted: nothing staged, nothing evicted */
        else if (add_checked(&totals->evicted, victim_size) < 0)
            return -1;
    }
    return 0;
}

/* A miss of a file that fits: it is staged with its current key, then the lowest keys go until the cache fits
 * (it may be one of them); a file that would be the lowest entry, when something must go, is not admitted. */
static int
stage(Loop *self, Rating *rating, Totals *totals, PyObject *file, PyObject *size_object, long long size,
      PyObject *group, PyObject *known)
{
    int failed = 0, own = 0;
    if (self->fast) {
        own = !differ(known, group); /* the file's first group is this request's */
        failed = PyErr_Occurred() != NULL;
    }
    PyObject *keyed = failed || !own ? NULL : keyed_group(self, file, known, &failed);
    PyObject *key = failed ? NULL : current_key(self, rating, file, keyed);
    if (key == NULL)
        return -1;
    if (totals->used + size > self->capacity && PyList_GET_SIZE(self->heap) > 0) {
        PyObject *entry = PyTuple_Pack(2, key, file);
        int lowest = entry == NULL ? -1 : entry_lt(entry, PyList_GET_ITEM(self->heap, 0));
        Py_XDECREF(entry);
        if (lowest != 0) { /* the loop below would evict it first and nothing else (used <= cap here) */
            Py_DECREF(key);
            return lowest < 0 ? -1 : 0;
        }
    }
    failed = PyDict_SetItem(self->sizes, file, size_object) < 0 || PyDict_SetItem(self->entry_key, file, key) < 0
             || heap_push(self->heap, key, file) < 0;
    Py_DECREF(key);
    if (failed)
        return -1;
    totals->used += size;
    long long staged = size;
    if (make_room(self, rating, totals, file, &staged) < 0)
        return -1;
    return add_checked(&totals->staged, staged);
}

/* One request: its group's bookkeeping and access, then a hit, or a miss that may stage the file. */
static int
request(Loop *self, Rating *rating, Totals *totals, PyObject *t, PyObject *file, PyObject *size_object,
        PyObject *group)
{
    long long size;
    PyObject *known;
    if (!PyLong_Check(file)) {
        PyErr_SetString(PyExc_TypeError, "file ids must be ints");
        return -1;
    }
    if (as_bytes(size_object, &size) < 0 || note_group(self, file, group, size, &known) < 0)
        return -1;
    Py_INCREF(known); /* the rating's callback (a re-key) runs Python: hold it across the access */
    int failed = record_access(self, rating, group, t);
    int cached = failed ? -1 : PyDict_Contains(self->entry_key, file);
    if (cached > 0) {
        totals->hits++;
        failed = add_checked(&totals->hit_bytes, size);
    }
    else if (cached == 0 && size <= self->capacity) {
        failed = stage(self, rating, totals, file, size_object, size, group, known);
    }
    Py_DECREF(known);
    return failed || cached < 0 ? -1 : 0;
}

/* -- the type ------------------------------------------------------------------------------------------------ */

PyDoc_STRVAR(replay_doc,
"replay(times, ids, sizes, groups, used)\n--\n\n"
"Serve the requests (lists of equal length) in order, ``used`` bytes already cached; returns\n"
"``(hits, hit_bytes, staged, evicted, used)`` of these requests (used: the bytes cached after them).");

static int
as_list(PyObject *value, Py_ssize_t n)
{
    if (!PyList_Check(value) || PyList_GET_SIZE(value) != n) {
        PyErr_SetString(PyExc_TypeError, "times, ids, sizes and groups must be lists of one length");
        return -1;
    }
    return 0;
}

/* the request's group: its own, or (none) the file's own group -2 - id (a new reference) */
static PyObject *
group_of_request(PyObject *group, PyObject *file)
{
    int overflow;
    long long g = PyLong_AsLongLongAndOverflow(group, &overflow);
    if (g == -1 && PyErr_Occurred())
        return NULL;
    if (overflow || g != NO_GROUP)
        return Py_NewRef(group);
    long long id = PyLong_AsLongLong(file);
    if (id == -1 && PyErr_Occurred())
        return NULL;
    return PyLong_FromLongLong(-2 - id); /* ids are dense from 0: never near the ends of 64 bits */
}

static PyObject *
Loop_replay(Loop *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "replay(times, ids, sizes, groups, used)");
        return NULL;
    }
    Py_ssize_t n = PyList_Check(args[0]) ? PyList_GET_SIZE(args[0]) : -1;
    for (int i = 0; i < 4; i++)
        if (as_list(args[i], n) < 0)
            return NULL;
    Totals totals = {0, 0, 0, 0, 0};
    if (as_bytes(args[4], &totals.used) < 0)
        return NULL;
    Rating rating = {PyObject_CallMethod(self->rating, "keys", NULL), NULL};
    if (rating.keys != NULL)
        rating.access = PyObject_GetAttrString(self->rating, "access");
    int failed = rating.access == NULL;
    if (!failed && !PyDict_Check(rating.keys)) {
        PyErr_SetString(PyExc_TypeError, "the rating's keys() must be a dict");
        failed = 1;
    }
    /* the lists are the engine's, built for this call; a new reference to each item outlives any callback */
    for (Py_ssize_t i = 0; i < n && !failed; i++) {
        PyObject *t = Py_NewRef(PyList_GET_ITEM(args[0], i)), *file = Py_NewRef(PyList_GET_ITEM(args[1], i));
        PyObject *size = Py_NewRef(PyList_GET_ITEM(args[2], i));
        PyObject *group = group_of_request(PyList_GET_ITEM(args[3], i), file);
        failed = group == NULL || request(self, &rating, &totals, t, file, size, group) < 0;
        Py_XDECREF(group);
        Py_DECREF(t);
        Py_DECREF(file);
        Py_DECREF(size);
    }
    Py_XDECREF(rating.keys);
    Py_XDECREF(rating.access);
    if (failed)
        return NULL;
    return Py_BuildValue("(LLLLL)", totals.hits, totals.hit_bytes, totals.staged, totals.evicted, totals.used);
}

static PyObject *
Loop_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"group_of", "more_groups", "last_access", "entry_key", "sizes", "heap", "group_bytes",
                            "rating", "file_key", "capacity", "per_job", "fast", NULL};
    PyObject *tables[9];
    long long capacity;
    int per_job, fast;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$O!O!O!O!O!O!OOOLpp:Loop", names, &PyDict_Type, &tables[0],
                                     &PyDict_Type, &tables[1], &PyDict_Type, &tables[2], &PyDict_Type, &tables[3],
                                     &PyDict_Type, &tables[4], &PyList_Type, &tables[5], &tables[6], &tables[7],
                                     &tables[8], &capacity, &per_job, &fast))
        return NULL;
    if (tables[6] != Py_None && !PyDict_Check(tables[6])) {
        PyErr_SetString(PyExc_TypeError, "group_bytes must be a dict or None");
        return NULL;
    }
    Loop *self = (Loop *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    PyObject **slots[9] = {&self->group_of, &self->more_groups, &self->last_access, &self->entry_key, &self->sizes,
                           &self->heap, &self->group_bytes, &self->rating, &self->file_key};
    for (int i = 0; i < 9; i++)
        *slots[i] = Py_NewRef(tables[i]);
    self->capacity = capacity;
    self->per_job = per_job;
    self->fast = fast;
    return (PyObject *)self;
}

/* the loop holds the policy's bound file_key, and the policy holds the loop: a cycle the collector breaks */
static int
Loop_traverse(Loop *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->group_of);
    Py_VISIT(self->more_groups);
    Py_VISIT(self->last_access);
    Py_VISIT(self->entry_key);
    Py_VISIT(self->sizes);
    Py_VISIT(self->heap);
    Py_VISIT(self->group_bytes);
    Py_VISIT(self->rating);
    Py_VISIT(self->file_key);
    return 0;
}

static int
Loop_clear(Loop *self)
{
    Py_CLEAR(self->group_of);
    Py_CLEAR(self->more_groups);
    Py_CLEAR(self->last_access);
    Py_CLEAR(self->entry_key);
    Py_CLEAR(self->sizes);
    Py_CLEAR(self->heap);
    Py_CLEAR(self->group_bytes);
    Py_CLEAR(self->rating);
    Py_CLEAR(self->file_key);
    return 0;
}

static void
Loop_dealloc(Loop *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Loop_clear(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyMethodDef Loop_methods[] = {
    {"replay", (PyCFunction)(void (*)(void))Loop_replay, METH_FASTCALL, replay_doc},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot Loop_slots[] = {
    {Py_tp_doc, "Loop(*, group_of, more_groups, last_access, entry_key, sizes, heap, group_bytes, rating, file_key, "
                "capacity, per_job, fast)\n--\n\nThe request loop of HTDAPolicy.replay over the policy's tables."},
    {Py_tp_new, Loop_new},
    {Py_tp_dealloc, Loop_dealloc},
    {Py_tp_traverse, Loop_traverse},
    {Py_tp_clear, Loop_clear},
    {Py_tp_methods, Loop_methods},
    {0, NULL},
};

static PyType_Spec Loop_spec = {
    .name = "htda.simulator._replay.Loop",
    .basicsize = sizeof(Loop),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = Loop_slots,
};

static int
module_exec(PyObject *module)
{
    if (unit_weight == NULL && (unit_weight = PyFloat_FromDouble(1.0)) == NULL)
        return -1;
    if (zero_bytes == NULL && (zero_bytes = PyLong_FromLong(0)) == NULL)
        return -1;
    PyObject *type = PyType_FromModuleAndSpec(module, &Loop_spec, NULL);
    if (type == NULL)
        return -1;
    int failed = PyModule_AddObjectRef(module, "Loop", type);
    Py_DECREF(type);
    return failed;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "htda.simulator._replay",
    .m_doc = "The request loop of HTDAPolicy.replay (htda.simulator.htda_policy) in C.",
    .m_size = 0,
    .m_slots = module_slots,
};

PyMODINIT_FUNC
PyInit__replay(void)
{
    return PyModuleDef_Init(&module_def);
}
