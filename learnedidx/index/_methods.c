/*
 * Store methods whose body is one call to a compiled kernel, called without a Python frame.
 *
 * Store.get and Store.put are each one call into a kernel of learnedidx.index.direct (C
 * functions compiled by Numba) on the store's descriptor, with a Python fallback for the
 * rare call the kernel declines.  Written in Python, such a method pays a frame, and the
 * call through Numba's own wrapper pays an argument tuple and the unboxing of every
 * argument: more, on a store in cache, than the lookup itself (docs/store.md).
 *
 * A Method is the descriptor of such a method in the class body:
 *
 *     Method(kind, resolve, impl, slow)
 *
 *   kind     METHOD_GET: get(key[, default]); the kernel `int64 k(int64 desc, PyObject *key)`
 *            answers the value (a borrowed reference), or 0 to decline.
 *            METHOD_PUT: put(key, value); the kernel `int64 k(int64 desc, PyObject *key,
 *            PyObject *value)` answers PUT_DONE, or a code to decline with.
 *   resolve  called once, on first use: the kernel's address (an int).
 *   impl     the method in Python, which every other call form (keywords, other argument
 *            counts, an object not of the owning class) is handed to unchanged.
 *   slow     name of the method a declined call goes to, as self.slow(*args) (get:
 *            key and default; put: key, value and the code).
 *
 * Bound to a store (s.get), it is a Bound holding the store and its descriptor address
 * (the int attribute `_addr`, fixed for the store's life), so that a call is the kernel
 * call and nothing else.  Called through the class (s.get(k) compiles to that), it reads
 * `_addr` per call.  The kernels hold no reference and release no lock: they run with the
 * GIL held, as the Python methods' kernels do, so a call is one step of the store.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>

#define METHOD_GET 1
#define METHOD_PUT 2
#define PUT_DONE (-1)

typedef int64_t (*get_kernel)(int64_t, PyObject *);
typedef int64_t (*put_kernel)(int64_t, PyObject *, PyObject *);

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int kind;
    void *kernel;            /* NULL until resolved */
    PyObject *resolve;
    PyObject *impl;
    PyObject *slow;          /* str */
    PyTypeObject *owner;     /* set by __set_name__; NULL: every call goes to impl */
} Method;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Method *method;
    PyObject *self;
    int64_t addr;
} Bound;

static PyTypeObject MethodType;
static PyTypeObject BoundType;
static PyObject *bound_vectorcall(PyObject *, PyObject *const *, size_t, PyObject *);
static PyObject *ADDR;  /* "_addr", interned */

/* ------------------------------------------------------------------ calls */

/* impl(self, *args, **kwargs), the arguments as vectorcall gave them. */
static PyObject *
call_impl(Method *m, PyObject *self, PyObject *const *args, Py_ssize_t n, PyObject *kwnames)
{
    Py_ssize_t total = n + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    PyObject *small[8];
    PyObject **all = total + 1 <= 8 ? small : PyMem_Malloc((total + 1) * sizeof(PyObject *));
    if (all == NULL)
        return PyErr_NoMemory();
    all[0] = self;
    for (Py_ssize_t i = 0; i < total; i++)
        all[i + 1] = args[i];
    PyObject *r = PyObject_Vectorcall(m->impl, all, n + 1, kwnames);
    if (all != small)
        PyMem_Free(all);
    return r;
}

/* The method on `self` (of the owning class, descriptor at `addr`). */
static PyObject *
call_kernel(Method *m, PyObject *self, int64_t addr, PyObject *const *args, Py_ssize_t n, PyObject *kwnames)
{
    if (kwnames == NULL) {
        if (m->kind == METHOD_GET && (n == 1 || n == 2)) {
            PyObject *v = (PyObject *)(intptr_t)((get_kernel)m->kernel)(addr, args[0]);
            if (v != NULL)
                return Py_NewRef(v);
            /* args[-1] is ours to use: the slot for self */
            PyObject *a[4] = {NULL, self, args[0], n == 2 ? args[1] : Py_None};
            return PyObject_VectorcallMethod(m->slow, a + 1, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        }
        if (m->kind == METHOD_PUT && n == 2) {
            int64_t c = ((put_kernel)m->kernel)(addr, args[0], args[1]);
            if (c == PUT_DONE)
                Py_RETURN_NONE;
            PyObject *code = PyLong_FromLongLong(c);
            if (code == NULL)
                return NULL;
            PyObject *a[5] = {NULL, self, args[0], args[1], code};
            PyObject *r = PyObject_VectorcallMethod(m->slow, a + 1, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            Py_DECREF(code);
            return r;
        }
    }
    return call_impl(m, self, args, n, kwnames);
}

static int
resolve(Method *m)
{
    if (m->kernel != NULL)
        return 0;
    PyObject *a = PyObject_CallNoArgs(m->resolve);
    if (a == NULL)
        return -1;
    void *p = PyLong_AsVoidPtr(a);
    Py_DECREF(a);
    if (p == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "a compiled method's kernel resolved to no address");
        return -1;
    }
    m->kernel = p;
    return 0;
}

/* 1 with the descriptor address of `self` when the kernel may be called on it, 0 when the
 * call goes to impl, -1 on an error (the kernel could not be resolved). */
static int
usable(Method *m, PyObject *self, int64_t *addr)
{
    if (m->owner == NULL || !PyObject_TypeCheck(self, m->owner))
        return 0;
    if (resolve(m) < 0)
        return -1;
    PyObject *a = PyObject_GetAttr(self, ADDR);
    if (a == NULL || !PyLong_CheckExact(a)) {
        Py_XDECREF(a);
        PyErr_Clear();  /* a store whose construction failed early: impl says what is wrong */
        return 0;
    }
    *addr = PyLong_AsLongLong(a);
    Py_DECREF(a);
    if (*addr == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return *addr != 0;
}

/* ------------------------------------------------------------------ Method */

static PyObject *
method_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Method *m = (Method *)op;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    int64_t addr = 0;
    int ok = n >= 1 ? usable(m, args[0], &addr) : 0;
    if (ok < 0)
        return NULL;
    if (!ok)
        return PyObject_Vectorcall(m->impl, args, n, kwnames);
    return call_kernel(m, args[0], addr, args + 1, n - 1, kwnames);
}

static PyObject *
method_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    int kind;
    PyObject *res, *impl, *slow;
    static char *names[] = {"kind", "resolve", "impl", "slow", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iOOU", names, &kind, &res, &impl, &slow))
        return NULL;
    if (kind != METHOD_GET && kind != METHOD_PUT) {
        PyErr_SetString(PyExc_ValueError, "kind must be METHOD_GET or METHOD_PUT");
        return NULL;
    }
    if (!PyCallable_Check(res) || !PyCallable_Check(impl)) {
        PyErr_SetString(PyExc_TypeError, "resolve and impl must be callable");
        return NULL;
    }
    Method *m = (Method *)type->tp_alloc(type, 0);
    if (m == NULL)
        return NULL;
    m->vectorcall = method_vectorcall;
    m->kind = kind;
    m->resolve = Py_NewRef(res);
    m->impl = Py_NewRef(impl);
    Py_INCREF(slow);
    PyUnicode_InternInPlace(&slow);
    m->slow = slow;
    return (PyObject *)m;
}

static int
method_traverse(Method *m, visitproc visit, void *arg)
{
    Py_VISIT(m->resolve);
    Py_VISIT(m->impl);
    Py_VISIT(m->owner);
    return 0;
}

static int
method_clear(Method *m)
{
    Py_CLEAR(m->resolve);
    Py_CLEAR(m->impl);
    Py_CLEAR(m->owner);
    return 0;
}

static void
method_dealloc(Method *m)
{
    PyObject_GC_UnTrack(m);
    method_clear(m);
    Py_CLEAR(m->slow);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static PyObject *
method_descr_get(PyObject *op, PyObject *self, PyObject *type)
{
    Method *m = (Method *)op;
    if (self == NULL || self == Py_None)
        return Py_NewRef(op);
    int64_t addr = 0;
    int ok = usable(m, self, &addr);
    if (ok < 0)
        return NULL;
    if (!ok)
        return PyMethod_New(op, self);
    Bound *b = PyObject_GC_New(Bound, &BoundType);
    if (b == NULL)
        return NULL;
    b->vectorcall = bound_vectorcall;
    b->method = (Method *)Py_NewRef(op);
    b->self = Py_NewRef(self);
    b->addr = addr;
    PyObject_GC_Track(b);
    return (PyObject *)b;
}

static PyObject *
method_set_name(Method *m, PyObject *args)
{
    PyObject *owner, *name;
    if (!PyArg_ParseTuple(args, "O!U", &PyType_Type, &owner, &name))
        return NULL;
    if (m->owner == NULL)  /* the first class it is given to */
        m->owner = (PyTypeObject *)Py_NewRef(owner);
    Py_RETURN_NONE;
}

/* __doc__, __name__, __qualname__, __module__ and __wrapped__ are impl's */
static PyObject *
method_impl_attr(Method *m, void *name)
{
    if (strcmp((const char *)name, "__wrapped__") == 0)
        return Py_NewRef(m->impl);
    return PyObject_GetAttrString(m->impl, (const char *)name);
}

static PyObject *
method_repr(Method *m)
{
    return PyUnicode_FromFormat("<compiled method %R>", m->impl);
}

static PyMethodDef method_methods[] = {
    {"__set_name__", (PyCFunction)method_set_name, METH_VARARGS, "Record the owning class."},
    {NULL}
};

/* the attributes a method takes from impl, each read by `get` */
#define IMPL_ATTRS(get)                                     \
    {"__doc__", (getter)get, NULL, NULL, "__doc__"},           \
    {"__name__", (getter)get, NULL, NULL, "__name__"},         \
    {"__qualname__", (getter)get, NULL, NULL, "__qualname__"}, \
    {"__module__", (getter)get, NULL, NULL, "__module__"},     \
    {"__wrapped__", (getter)get, NULL, NULL, "__wrapped__"}

static PyGetSetDef method_getset[] = {
    IMPL_ATTRS(method_impl_attr),
    {NULL}
};

static PyTypeObject MethodType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "learnedidx.index._methods.Method",
    .tp_doc = "A method whose body is one call to a compiled kernel (see the module's source).",
    .tp_basicsize = sizeof(Method),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL
                | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_vectorcall_offset = offsetof(Method, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = method_new,
    .tp_traverse = (traverseproc)method_traverse,
    .tp_clear = (inquiry)method_clear,
    .tp_dealloc = (destructor)method_dealloc,
    .tp_descr_get = method_descr_get,
    .tp_methods = method_methods,
    .tp_getset = method_getset,
    .tp_repr = (reprfunc)method_repr,
};

/* ------------------------------------------------------------------ Bound */

static PyObject *
bound_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Bound *b = (Bound *)op;
    if (b->self == NULL) {
        PyErr_SetString(PyExc_ReferenceError, "the store of this method is gone");
        return NULL;
    }
    return call_kernel(b->method, b->self, b->addr, args, PyVectorcall_NARGS(nargsf), kwnames);
}

static int
bound_traverse(Bound *b, visitproc visit, void *arg)
{
    Py_VISIT(b->method);
    Py_VISIT(b->self);
    return 0;
}

static int
bound_clear(Bound *b)
{
    /* the collector clears only garbage, which nothing calls again; a call would raise */
    Py_CLEAR(b->self);
    return 0;
}

static void
bound_dealloc(Bound *b)
{
    PyObject_GC_UnTrack(b);
    Py_CLEAR(b->self);
    Py_CLEAR(b->method);
    PyObject_GC_Del(b);
}

static PyObject *
bound_self(Bound *b, void *closure)
{
    return Py_NewRef(b->self ? b->self : Py_None);
}

static PyObject *
bound_func(Bound *b, void *closure)
{
    return Py_NewRef((PyObject *)b->method);
}

static PyObject *
bound_impl_attr(Bound *b, void *name)
{
    if (strcmp((const char *)name, "__wrapped__") == 0)  /* the Python method, bound */
        return PyMethod_New(b->method->impl, b->self ? b->self : Py_None);
    return method_impl_attr(b->method, name);
}

static PyObject *
bound_repr(Bound *b)
{
    PyObject *name = PyObject_GetAttrString(b->method->impl, "__qualname__");
    if (name == NULL)
        return NULL;
    PyObject *r = PyUnicode_FromFormat("<compiled method %S of %R>", name, b->self ? b->self : Py_None);
    Py_DECREF(name);
    return r;
}

static PyObject *
bound_richcompare(PyObject *a, PyObject *o, int op)
{
    if ((op != Py_EQ && op != Py_NE) || !PyObject_TypeCheck(o, &BoundType))
        Py_RETURN_NOTIMPLEMENTED;
    Bound *x = (Bound *)a, *y = (Bound *)o;
    int eq = x->method == y->method && x->self == y->self;
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

static Py_hash_t
bound_hash(Bound *b)
{
    /* as bound methods hash: by the identities of their object and function */
    Py_hash_t h = (Py_hash_t)(((uintptr_t)b->self >> 4) ^ ((uintptr_t)b->method >> 4) * 1000003);
    return h == -1 ? -2 : h;
}

static PyGetSetDef bound_getset[] = {
    {"__self__", (getter)bound_self, NULL, NULL, NULL},
    {"__func__", (getter)bound_func, NULL, NULL, NULL},
    IMPL_ATTRS(bound_impl_attr),
    {NULL}
};

static PyTypeObject BoundType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "learnedidx.index._methods.Bound",
    .tp_doc = "A compiled method bound to a store.",
    .tp_basicsize = sizeof(Bound),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Bound, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = (traverseproc)bound_traverse,
    .tp_clear = (inquiry)bound_clear,
    .tp_dealloc = (destructor)bound_dealloc,
    .tp_getset = bound_getset,
    .tp_repr = (reprfunc)bound_repr,
    .tp_richcompare = bound_richcompare,
    .tp_hash = (hashfunc)bound_hash,
};

/* ------------------------------------------------------------------ module */

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "learnedidx.index._methods",
    .m_doc = "Store methods whose body is one call to a compiled kernel (see the source).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__methods(void)
{
    if (PyType_Ready(&MethodType) < 0 || PyType_Ready(&BoundType) < 0)
        return NULL;
    ADDR = PyUnicode_InternFromString("_addr");
    if (ADDR == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Method", (PyObject *)&MethodType) < 0
        || PyModule_AddIntConstant(m, "METHOD_GET", METHOD_GET) < 0
        || PyModule_AddIntConstant(m, "METHOD_PUT", METHOD_PUT) < 0
        || PyModule_AddIntConstant(m, "PUT_DONE", PUT_DONE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
