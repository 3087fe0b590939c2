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
 * The pool: blocks of 4 KiB to 8 MiB in size classes (eight per power of two, so that a
 * block wastes at most an eighth), cut from 256 MiB regions (reserved, not committed:
 * MAP_NORESERVE, pages are taken on first touch) and, once freed, kept on their class's
 * free list for the next block of that class; larger blocks are mapped and unmapped
 * alone.  Freed blocks are kept while any pooled block is in use (a store's arrays are
 * replaced by arrays of about the same sizes as its groups fold and split, so they are
 * taken again) and every region is unmapped when none is (every store closed).  Every call is made holding the GIL (the types' constructors and
 * deallocators), which serializes the pool; a fork copies it consistent.  Blocks are
 * reported to tracemalloc (domain TRACE_DOMAIN), as numpy reports its arrays.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE (2u << 20)
#define REGION ((size_t)256 << 20)
#define MIN_BLOCK ((size_t)4096)
#define MAX_POOLED ((size_t)8 << 20)
#define NCLASSES 89               /* 4 KiB, then 8 per power of two up to 8 MiB */
#define TRACE_DOMAIN 0x6c697078   /* "lipx" */

static char *bump, *bump_end;     /* the current region's untouched rest */
static void *free_list[NCLASSES]; /* freed blocks, linked through their first word */
static size_t committed;          /* bytes of pooled blocks handed out and not freed */
static char **regions;            /* every region mapped, to unmap them all when unused */
static Py_ssize_t nregions;

/* The class of a request of n bytes (n <= MAX_POOLED) and its block size. */
static int
class_of(size_t n, size_t *size)
{
    if (n <= MIN_BLOCK) {
        *size = MIN_BLOCK;
        return 0;
    }
    int e = 63 - __builtin_clzll((unsigned long long)(n - 1));  /* 2^e < n <= 2^(e+1) */
    size_t step = (size_t)1 << (e - 3);
    size_t q = (n + step - 1) / step;                               /* 9..16 */
    *size = q * step;
    return (e - 12) * 8 + (int)(q - 9) + 1;
}

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

/* A fresh region to cut from (the old one's rest is left untouched); 0 on failure. */
static int
new_region(void)
{
    char **more = PyMem_Realloc(regions, (nregions + 1) * sizeof(char *));
    if (more == NULL)
        return 0;
    regions = more;
    char *r = map_huge(REGION);
    if (r == NULL)
        return 0;
    regions[nregions++] = r;
    bump = r;
    bump_end = r + REGION;
    return 1;
}

/* Every region back to the system: no pooled block is in use. */
static void
release_regions(void)
{
    for (Py_ssize_t i = 0; i < nregions; i++)
        munmap(regions[i], REGION);
    nregions = 0;
    memset(free_list, 0, sizeof free_list);
    bump = bump_end = NULL;
}

static size_t
large_size(size_t n)
{
    return (n + HUGE - 1) & ~(size_t)(HUGE - 1);
}

/* A block of at least n bytes (its size in *size), zeroed when `zero`; NULL with
 * MemoryError set. */
static void *
pool_alloc(size_t n, int zero, size_t *size)
{
    void *p;
    if (n > MAX_POOLED) {
        *size = large_size(n);
        p = map_huge(*size);  /* fresh pages read as zeros */
    } else {
        int c = class_of(n, size);
        p = free_list[c];
        if (p != NULL) {
            free_list[c] = *(void **)p;
            if (zero)
                memset(p, 0, *size);
        } else {
            if ((bump == NULL || (size_t)(bump_end - bump) < *size) && !new_region()) {
                PyErr_NoMemory();
                return NULL;
            }
            p = bump;  /* never touched: zeros */
            bump += *size;
        }
    }
    if (p == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    if (n <= MAX_POOLED)
        committed += *size;
    PyTraceMalloc_Track(TRACE_DOMAIN, (uintptr_t)p, *size);
    return p;
}

static void
pool_free(void *p, size_t size)
{
    PyTraceMalloc_Untrack(TRACE_DOMAIN, (uintptr_t)p);
    if (size > MAX_POOLED) {
        munmap(p, size);
        return;
    }
    size_t s;
    int c = class_of(size, &s);
    *(void **)p = free_list[c];
    free_list[c] = p;
    committed -= size;
    if (committed == 0)
        release_regions();
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
pages_block_size(PyObject *mod, PyObject *arg)
{
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n <= 0) {
        PyErr_SetString(PyExc_ValueError, "a block holds at least one byte");
        return NULL;
    }
    size_t size;
    if ((size_t)n > MAX_POOLED)
        size = large_size((size_t)n);
    else
        class_of((size_t)n, &size);
    return PyLong_FromSize_t(size);
}

static PyMethodDef module_methods[] = {
    {"committed", pages_committed, METH_NOARGS, "Bytes of pooled blocks in use (handed out, not freed)."},
    {"regions", pages_regions, METH_NOARGS, "Regions mapped for pooled blocks."},
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
