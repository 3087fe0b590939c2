/*
 * Memory for a store's group arrays and value slots, in transparent huge pages.
 *
 * A lookup in a large store reads a group's heads, offsets, key bytes and value slot at
 * places no cache has seen lately; with 4 KiB pages each such load also misses the TLB and
 * walks the page table, itself mostly out of cache (docs/store.md#memory-in-huge-pages).
 * The blocks here come from regions the kernel is asked to back with 2 MiB pages
 * (madvise MADV_HUGEPAGE, honoured when /sys/kernel/mm/transparent_hugepage/enabled is
 * "madvise" or "always"; elsewhere they are ordinary pages), so that the arrays of
 * thousands of groups take a few hundred TLB entries instead of hundreds of thousands.
 *
 *   Block(nbytes, zero=False)   a writable buffer of nbytes (numpy views it, pages.py)
 *   Slots(items, extra=0)       references to the items of list `items`, then `extra`
 *                               Nones, laid out as a list is: the count at a list's ob_size
 *                               and the item array at its ob_item, so compiled code reads
 *                               and writes its items as it does a list's.  It owns one
 *                               reference per slot; len(), s[i] and copy() read it.
 *
 * The pool: blocks of 4 KiB to 8 MiB, in whole pages, cut from 256 MiB regions (reserved,
 * not committed: MAP_NORESERVE, pages are taken on first touch), each with a map of its
 * pages in use.  A block takes the first run of free pages that holds it (first fit), so
 * blocks freed side by side merge, and the arrays a fold-in or a split frees are cut again
 * for arrays of any size; blocks in use stay low in their region.  A huge page left with
 * no block in use goes back to the system at once (MADV_DONTNEED; a block there later
 * takes a fresh one), so a store's resident memory follows its arrays, not its history.
 * Larger blocks are mapped and unmapped alone, and every region is unmapped when no
 * pooled block is in use (every store closed).  Every call is made holding the GIL (the
 * types' constructors and deallocators), which serializes the pool; a fork copies it
 * consistent.  Blocks are reported to tracemalloc (domain TRACE_DOMAIN), as numpy
 * reports its arrays.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE ((size_t)2 << 20)
#define REGION ((size_t)256 << 20)
#define PAGE ((size_t)4096)
#define MIN_BLOCK PAGE
#define MAX_POOLED ((size_t)8 << 20)
#define NPAGES (REGION / PAGE)          /* a region's pages */
#define NWORDS (NPAGES / 64)            /* the words of its page map */
#define HUGE_WORDS (HUGE / PAGE / 64)   /* the words of one huge page's pages */
#define TRACE_DOMAIN 0x6c697078         /* "lipx" */

typedef struct {
    char *base;
    size_t top;             /* no page from here on is in use or holds data: they read as zeros */
    size_t nfree;           /* pages in no block */
    size_t first;           /* every page of the map's words before this one is in a block */
    uint64_t used[NWORDS];  /* a bit per page, set while the page is in a block */
} Region;

static Region **regions;  /* every region mapped, to unmap them all when none is used */
static Py_ssize_t nregions;
static size_t committed;  /* bytes of pooled blocks handed out and not freed */
static size_t given_back; /* huge pages handed back to the system while regions stay mapped */

/* size bytes mapped on their own, 2 MiB aligned, asked to be huge pages; NULL on failure. */
static char *
map_huge(size_t size)
{
    size_t span = size + HUGE;
    char *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    char *a = (char *)(((uintptr_t)p + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
    if (a > p)
        munmap(p, a - p);
    if (p + span > a + size)
        munmap(a + size, p + span - (a + size));
    madvise(a, size, MADV_HUGEPAGE);  /* refused where THP is off: ordinary pages then */
    return a;
}

/* A fresh region, every page free; NULL on failure. */
static Region *
new_region(void)
{
    Region **more = PyMem_Realloc(regions, (nregions + 1) * sizeof(Region *));
    if (more == NULL)
        return NULL;
    regions = more;
    Region *r = PyMem_Calloc(1, sizeof(Region));
    if (r == NULL)
        return NULL;
    if ((r->base = map_huge(REGION)) == NULL) {
        PyMem_Free(r);
        return NULL;
    }
    r->nfree = NPAGES;
    regions[nregions++] = r;
    return r;
}

/* Every region back to the system: no pooled block is in use. */
static void
release_regions(void)
{
    for (Py_ssize_t i = 0; i < nregions; i++) {
        munmap(regions[i]->base, REGION);
        PyMem_Free(regions[i]);
    }
    nregions = 0;
}

/* The first run of k free pages in r's map (first fit, which keeps the blocks in use
 * low in the region and lets the pages above them go back); NPAGES if there is none. */
static size_t
find_run(const Region *r, size_t k)
{
    size_t run = 0, start = 0;
    for (size_t w = r->first; w < NWORDS; w++) {
        uint64_t x = r->used[w];
        if (x == 0) {
            if (run == 0)
                start = w * 64;
            run += 64;
        } else if (x == ~(uint64_t)0) {
            run = 0;
        } else {
            for (unsigned b = 0; b < 64;) {
                uint64_t y = x >> b;
                if (y & 1) {  /* pages in use: skip them (~y is not 0, its top b bits are set) */
                    b += (unsigned)__builtin_ctzll(~y);
                    run = 0;
                    continue;
                }
                unsigned zeros = y ? (unsigned)__builtin_ctzll(y) : 64 - b;
                if (run == 0)
                    start = w * 64 + b;
                run += zeros;
                b += zeros;
                if (run >= k)
                    return start;
            }
        }
        if (run >= k)
            return start;
    }
    return NPAGES;
}

/* Set (or clear) the bits of pages [at, at + k) in map. */
static void
mark(uint64_t *map, size_t at, size_t k, int set)
{
    for (size_t end = at + k; at < end;) {
        size_t b = at % 64, n = 64 - b < end - at ? 64 - b : end - at;
        uint64_t m = (n == 64 ? ~(uint64_t)0 : (((uint64_t)1 << n) - 1)) << b;
        if (set)
            map[at / 64] |= m;
        else
            map[at / 64] &= ~m;
        at += n;
    }
}

/* The size of the block a request of n bytes takes: whole pages in the pool, whole huge
 * pages for a block mapped alone. */
static size_t
block_bytes(size_t n)
{
    if (n > MAX_POOLED)
        return (n + HUGE - 1) & ~(size_t)(HUGE - 1);
    return (n + PAGE - 1) / PAGE * PAGE;
}

/* A block of at least n bytes (its size in *size), zeroed when `zero`; NULL with
 * MemoryError set. */
static void *
pool_alloc(size_t n, int zero, size_t *size)
{
    *size = block_bytes(n);
    if (n > MAX_POOLED) {
        void *p = map_huge(*size);  /* fresh pages read as zeros */
        if (p == NULL)
            PyErr_NoMemory();
        else
            PyTraceMalloc_Track(TRACE_DOMAIN, (uintptr_t)p, *size);
        return p;
    }
    size_t k = *size / PAGE, at = NPAGES;
    Region *r = NULL;
    for (Py_ssize_t i = 0; i < nregions && r == NULL; i++)
        if (regions[i]->nfree >= k && (at = find_run(regions[i], k)) < NPAGES)
            r = regions[i];
    if (r == NULL) {
        if ((r = new_region()) == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        at = 0;
    }
    mark(r->used, at, k, 1);
    r->nfree -= k;
    while (r->first < NWORDS && r->used[r->first] == ~(uint64_t)0)
        r->first++;
    char *p = r->base + at * PAGE;
    if (zero && at < r->top)  /* pages at and above top read as zeros already */
        memset(p, 0, ((at + k < r->top ? at + k : r->top) - at) * PAGE);
    if (at + k > r->top)
        r->top = at + k;
    committed += *size;
    PyTraceMalloc_Track(TRACE_DOMAIN, (uintptr_t)p, *size);
    return p;
}

static int
huge_page_free(const Region *r, size_t h)
{
    for (size_t w = h * HUGE_WORDS; w < (h + 1) * HUGE_WORDS; w++)
        if (r->used[w])
            return 0;
    return 1;
}

/* Pages [at, at + k) of r were just freed: every huge page they leave with no block goes
 * back to the system (a later block there takes a fresh one), and top comes down over
 * the free huge pages under it. */
static void
give_back(Region *r, size_t at, size_t k)
{
    size_t per = HUGE / PAGE;
    for (size_t h = at / per; h <= (at + k - 1) / per; h++)
        if (h * per < r->top && huge_page_free(r, h)) {
            madvise(r->base + h * HUGE, HUGE, MADV_DONTNEED);
            given_back++;
        }
    while (r->top > 0 && huge_page_free(r, (r->top - 1) / per))
        r->top = (r->top - 1) / per * per;
}

static void
pool_free(void *p, size_t size)
{
    PyTraceMalloc_Untrack(TRACE_DOMAIN, (uintptr_t)p);
    if (size > MAX_POOLED) {
        munmap(p, size);
        return;
    }
    committed -= size;
    if (committed == 0) {
        release_regions();
        return;
    }
    Region *r = NULL;  /* the region that holds p: one of a few, every block is in one */
    for (Py_ssize_t i = 0; i < nregions && r == NULL; i++)
        if ((char *)p >= regions[i]->base && (char *)p < regions[i]->base + REGION)
            r = regions[i];
    assert(r != NULL);
    size_t at = (size_t)((char *)p - r->base) / PAGE, k = size / PAGE;
    mark(r->used, at, k, 0);
    r->nfree += k;
    if (at / 64 < r->first)
        r->first = at / 64;
    give_back(r, at, k);
}

/* ------------------------------------------------------------------ Block */

typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t nbytes;
    size_t size;
} Block;

static PyObject *
block_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"nbytes", "zero", NULL};
    Py_ssize_t n;
    int zero = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n|p", kw, &n, &zero))
        return NULL;
    if (n <= 0) {
        PyErr_SetString(PyExc_ValueError, "a block holds at least one byte");
        return NULL;
    }
    Block *b = (Block *)type->tp_alloc(type, 0);
    if (b == NULL)
        return NULL;
    b->data = pool_alloc((size_t)n, zero, &b->size);
    if (b->data == NULL) {
        Py_DECREF(b);
        return NULL;
    }
    b->nbytes = n;
    return (PyObject *)b;
}

static void
block_dealloc(Block *b)
{
    if (b->data != NULL)
        pool_free(b->data, b->size);
    Py_TYPE(b)->tp_free((PyObject *)b);
}

static int
block_getbuffer(Block *b, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)b, b->data, b->nbytes, 0, flags);
}

static PyBufferProcs block_as_buffer = {(getbufferproc)block_getbuffer, NULL};

static PyObject *
block_address(Block *b, void *closure)
{
    return PyLong_FromVoidPtr(b->data);
}

static PyGetSetDef block_getset[] = {
    {"address", (getter)block_address, NULL, "address of the first byte", NULL},
    {NULL},
};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "learnedidx.index._pages.Block",
    .tp_basicsize = sizeof(Block),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Block(nbytes, zero=False): a writable buffer from the huge-page pool.",
    .tp_new = block_new,
    .tp_dealloc = (destructor)block_dealloc,
    .tp_as_buffer = &block_as_buffer,
    .tp_getset = block_getset,
};

/* ------------------------------------------------------------------ Slots */

/* The layout of PyListObject up to its item array: compiled code reads ob_size and
 * ob_item at a list's offsets (layout.OB_SIZE, layout.LIST_ITEMS). */
typedef struct {
    PyObject_VAR_HEAD
    PyObject **ob_item;
    size_t size;      /* bytes of the item array's block; 0: PyMem_Malloc'd */
} Slots;

_Static_assert(offsetof(Slots, ob_item) == offsetof(PyListObject, ob_item), "Slots must lay out as a list");

static PyTypeObject SlotsType;

/* n slots, every one NULL (the caller fills them all). */
static Slots *
slots_alloc(Py_ssize_t n)
{
    Slots *s = PyObject_New(Slots, &SlotsType);
    if (s == NULL)
        return NULL;
    Py_SET_SIZE(s, 0);
    s->ob_item = NULL;
    s->size = 0;
    size_t nbytes = (size_t)(n > 0 ? n : 1) * sizeof(PyObject *);
    if (nbytes >= MIN_BLOCK)
        s->ob_item = pool_alloc(nbytes, 0, &s->size);
    else if ((s->ob_item = PyMem_Malloc(nbytes)) == NULL)
        PyErr_NoMemory();
    if (s->ob_item == NULL) {
        Py_DECREF(s);
        return NULL;
    }
    return s;
}

static PyObject *
slots_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kw[] = {"items", "extra", NULL};
    PyObject *items;
    Py_ssize_t extra = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!|n", kw, &PyList_Type, &items, &extra))
        return NULL;
    if (extra < 0) {
        PyErr_SetString(PyExc_ValueError, "extra must be >= 0");
        return NULL;
    }
    Py_ssize_t m = PyList_GET_SIZE(items);
    if (extra > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(PyObject *) - m)
        return PyErr_NoMemory();
    Slots *s = slots_alloc(m + extra);
    if (s == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < m; i++)
        s->ob_item[i] = Py_NewRef(PyList_GET_ITEM(items, i));
    for (Py_ssize_t i = m; i < m + extra; i++)
        s->ob_item[i] = Py_NewRef(Py_None);
    Py_SET_SIZE(s, m + extra);
    return (PyObject *)s;
}

static void
slots_dealloc(Slots *s)
{
    if (s->ob_item != NULL) {
        Py_ssize_t n = Py_SIZE(s);
        Py_SET_SIZE(s, 0);
        while (--n >= 0)
            Py_XDECREF(s->ob_item[n]);
        if (s->size)
            pool_free(s->ob_item, s->size);
        else
            PyMem_Free(s->ob_item);
    }
    PyObject_Free(s);
}

static Py_ssize_t
slots_length(Slots *s)
{
    return Py_SIZE(s);
}

static PyObject *
slots_item(Slots *s, Py_ssize_t i)
{
    if (i < 0 || i >= Py_SIZE(s)) {
        PyErr_SetString(PyExc_IndexError, "slot index out of range");
        return NULL;
    }
    return Py_NewRef(s->ob_item[i]);
}

static PyObject *
slots_copy(Slots *s, PyObject *unused)
{
    Py_ssize_t n = Py_SIZE(s);
    Slots *c = slots_alloc(n);
    if (c == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++)
        c->ob_item[i] = Py_NewRef(s->ob_item[i]);
    Py_SET_SIZE(c, n);
    return (PyObject *)c;
}

static PySequenceMethods slots_as_sequence = {
    .sq_length = (lenfunc)slots_length,
    .sq_item = (ssizeargfunc)slots_item,
};

static PyMethodDef slots_methods[] = {
    {"copy", (PyCFunction)slots_copy, METH_NOARGS, "New slots holding the same references."},
    {NULL},
};

static PyTypeObject SlotsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "learnedidx.index._pages.Slots",
    .tp_basicsize = sizeof(Slots),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Slots(items, extra=0): the references of list items, then extra Nones, laid out as a list.",
    .tp_new = slots_new,
    .tp_dealloc = (destructor)slots_dealloc,
    .tp_as_sequence = &slots_as_sequence,
    .tp_methods = slots_methods,
};

/* ------------------------------------------------------------------ module */

static PyObject *
pages_committed(PyObject *mod, PyObject *unused)
{
    return PyLong_FromSize_t(committed);
}

static PyObject *
pages_regions(PyObject *mod, PyObject *unused)
{
    return PyLong_FromSsize_t(nregions);
}

static PyObject *
pages_given_back(PyObject *mod, PyObject *unused)
{
    return PyLong_FromSize_t(given_back);
}

static PyObject *
pages_block_size(PyObject *mod, PyObject *arg)
{
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n <= 0) {
        PyErr_SetString(PyExc_ValueError, "a block holds at least one byte");
        return NULL;
    }
    return PyLong_FromSize_t(block_bytes((size_t)n));
}

static PyMethodDef module_methods[] = {
    {"committed", pages_committed, METH_NOARGS, "Bytes of pooled blocks in use (handed out, not freed)."},
    {"regions", pages_regions, METH_NOARGS, "Regions mapped for pooled blocks."},
    {"given_back", pages_given_back, METH_NOARGS, "Huge pages handed back to the system, all empty, while regions stayed mapped."},
    {"block_size", pages_block_size, METH_O, "The size of the block a request of n bytes takes."},
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "learnedidx.index._pages",
    "Blocks and value slots in transparent huge pages (see the C source).", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__pages(void)
{
    if (PyType_Ready(&BlockType) < 0 || PyType_Ready(&SlotsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Block", (PyObject *)&BlockType) < 0
        || PyModule_AddObjectRef(m, "Slots", (PyObject *)&SlotsType) < 0
        || PyModule_AddIntConstant(m, "MIN_BLOCK", (long)MIN_BLOCK) < 0
        || PyModule_AddIntConstant(m, "MAX_POOLED", (long)MAX_POOLED) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
