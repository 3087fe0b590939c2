"""Raw memory access for Numba kernels, as LLVM intrinsics: unaligned loads, prefetches,
loads and copies from integer addresses, and addresses as typed pointers.

One home for every llvmlite intrinsic of the project: the learned index's search kernels
(:mod:`learnedidx.index.kernels`), its reads of CPython objects
(:mod:`learnedidx.index.pyobjects`) and the Striders' page decoding use these.
Unaligned loads are fine on x86-64 and AArch64, the only hosts the project runs on, and
host byte order is little-endian there.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import NativeValue, box, intrinsic, models, register_model, unbox

_I8P = ir.IntType(8).as_pointer()


def _byte_pointer(context, builder, arr_type, arr, idx):
    """LLVM pointer to byte ``idx`` of the data of array ``arr``."""
    ary = context.make_array(arr_type)(context, builder, arr)
    return builder.gep(ary.data, [idx])


def unaligned_load(value_type: types.Type):
    """An intrinsic ``load(arr, i)`` reading a ``value_type`` (host byte order) from byte
    ``i`` of a contiguous uint8 array, at any alignment; the caller checks the bounds.

    Heap pages hold values at unaligned offsets (short varlena headers shift array data by
    three bytes); one unaligned load is far cheaper than assembling bytes and reinterpreting
    them."""

    @intrinsic
    def load(typingctx, arr, i):
        if not (isinstance(arr, types.Buffer) and arr.dtype == types.uint8 and isinstance(i, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            ptr = _byte_pointer(context, builder, sig.args[0], args[0], args[1])
            llty = context.get_value_type(value_type)
            return builder.load(builder.bitcast(ptr, llty.as_pointer()), align=1)

        return value_type(arr, i), codegen

    return load


@intrinsic
def load_be64(typingctx, buf, idx):
    """The 8 bytes at ``buf[idx:idx+8]`` (a contiguous uint8 buffer; the caller checks the
    bounds) as a big-endian uint64, so that unsigned order is byte order."""
    if not (isinstance(buf, types.Buffer) and buf.dtype == types.uint8 and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        ptr = _byte_pointer(context, builder, signature.args[0], args[0], args[1])
        word = builder.load(builder.bitcast(ptr, i64.as_pointer()), align=1)
        bswap = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [i64]), "llvm.bswap.i64")
        return builder.call(bswap, [word])

    return types.uint64(buf, idx), codegen


def _emit_prefetch(builder, ptr) -> None:
    i32 = ir.IntType(32)
    fn = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), [_I8P, i32, i32, i32]), "llvm.prefetch.p0i8")
    # read access, high temporal locality, data cache
    builder.call(fn, [builder.bitcast(ptr, _I8P), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])


@intrinsic
def prefetch(typingctx, arr, idx):
    """Hint the CPU to fetch the cache line of ``arr[idx]`` (no bounds check needed: a
    prefetch never faults and has no effect on results)."""
    if not isinstance(arr, types.Array) or not isinstance(idx, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        _emit_prefetch(builder, builder.gep(ary.data, [args[1]]))
        return context.get_dummy_value()

    return types.void(arr, idx), codegen


@intrinsic
def prefetch_address(typingctx, addr):
    """:func:`prefetch` of a raw address (never faults, whatever the address)."""
    if not isinstance(addr, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        _emit_prefetch(builder, builder.inttoptr(args[0], _I8P))
        return context.get_dummy_value()

    return types.void(addr), codegen


@intrinsic
def load_word(typingctx, addr):
    """The int64 stored at a raw address (the caller guarantees it is readable)."""
    if not isinstance(addr, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        return builder.load(builder.inttoptr(args[0], ir.IntType(64).as_pointer()))

    return types.int64(addr), codegen


@intrinsic
def store_word(typingctx, addr, value):
    """Store the int64 ``value`` at a raw address (the caller guarantees it is writable)."""
    if not (isinstance(addr, types.Integer) and isinstance(value, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        word = context.cast(builder, args[1], signature.args[1], types.int64)
        builder.store(word, builder.inttoptr(args[0], ir.IntType(64).as_pointer()))
        return context.get_dummy_value()

    return types.void(addr, value), codegen


@intrinsic
def call_with_address(typingctx, fn, arg):
    """Call the C function ``void fn(void *arg)`` at raw address ``fn``.  The address is
    an argument, not a constant, so that compiled code stays valid in the on-disk cache
    (libraries load at other addresses in another process)."""
    if not (isinstance(fn, types.Integer) and isinstance(arg, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.VoidType(), [_I8P])
        builder.call(builder.inttoptr(args[0], fnty.as_pointer()), [builder.inttoptr(args[1], _I8P)])
        return context.get_dummy_value()

    return types.void(fn, arg), codegen


@intrinsic
def copy_from_address(typingctx, dst, at, src, n):
    """Copy ``n`` bytes from raw address ``src`` into ``dst[at:at+n]`` (a uint8 array; the
    caller checks the bounds)."""
    if not (isinstance(dst, types.Array) and dst.dtype == types.uint8):
        return None

    def codegen(context, builder, signature, args):
        ptr = _byte_pointer(context, builder, signature.args[0], args[0], args[1])
        cgutils.raw_memcpy(builder, ptr, builder.inttoptr(args[2], cgutils.voidptr_t), args[3], 1)
        return context.get_dummy_value()

    return types.void(dst, at, src, n), codegen


@intrinsic
def move_bytes(typingctx, dst, src, n):
    """``memmove`` of ``n`` bytes from raw address ``src`` to raw address ``dst`` (the
    ranges may overlap; the caller checks the bounds)."""
    if not all(isinstance(a, types.Integer) for a in (dst, src, n)):
        return None

    def codegen(context, builder, signature, args):
        cgutils.raw_memmove(builder, builder.inttoptr(args[0], cgutils.voidptr_t),
                            builder.inttoptr(args[1], cgutils.voidptr_t), args[2], 1)
        return context.get_dummy_value()

    return types.void(dst, src, n), codegen


def pointer_to(dtype: types.Type):
    """An intrinsic ``at(addr)`` turning an integer address into a ``dtype`` pointer (for
    ``numba.carray``)."""

    @intrinsic
    def at(typingctx, addr):
        if not isinstance(addr, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

        return types.CPointer(dtype)(addr), codegen

    return at


@intrinsic
def load_be64_at(typingctx, addr):
    """The 8 bytes at raw address ``addr`` (any alignment; the caller guarantees they are
    readable) as a big-endian uint64, so that unsigned order is byte order."""
    if not isinstance(addr, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        word = builder.load(builder.inttoptr(args[0], i64.as_pointer()), align=1)
        bswap = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, [i64]), "llvm.bswap.i64")
        return builder.call(bswap, [word])

    return types.uint64(addr), codegen


@intrinsic
def load_byte(typingctx, addr):
    """The byte at raw address ``addr``, as an int64."""
    if not isinstance(addr, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        b = builder.load(builder.inttoptr(args[0], ir.IntType(8).as_pointer()))
        return builder.zext(b, ir.IntType(64))

    return types.int64(addr), codegen


@intrinsic
def call_with_two(typingctx, fn, a, b):
    """Call the C function ``void *fn(void *a, intptr_t b)`` at raw address ``fn`` and return
    its result as an integer (an argument, not a constant, for the same reason as
    :func:`call_with_address`)."""
    if not all(isinstance(x, types.Integer) for x in (fn, a, b)):
        return None

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        fnty = ir.FunctionType(_I8P, [_I8P, i64])
        res = builder.call(builder.inttoptr(args[0], fnty.as_pointer()),
                           [builder.inttoptr(args[1], _I8P), context.cast(builder, args[2], signature.args[2], types.int64)])
        return builder.ptrtoint(res, i64)

    return types.int64(fn, a, b), codegen


class PyRef(types.Opaque):
    """A Python object as a kernel argument or result, carried as its address.

    As an argument it is borrowed (the caller's reference keeps it alive for the call); as a
    result the kernel hands over a new reference (see :func:`as_ref`).  Reference counts
    change only in kernels that hold the GIL."""

    def __init__(self) -> None:
        super().__init__(name="PyRef")


pyref = PyRef()
register_model(PyRef)(models.OpaqueModel)


@unbox(PyRef)
def _unbox_pyref(typ, obj, c):
    return NativeValue(c.builder.bitcast(obj, _I8P))


@box(PyRef)
def _box_pyref(typ, val, c):
    return c.builder.bitcast(val, c.pyapi.pyobj)


@intrinsic
def address_of(typingctx, ref):
    """The address of a :data:`pyref` argument."""
    if not isinstance(ref, PyRef):
        return None

    def codegen(context, builder, signature, args):
        return builder.ptrtoint(args[0], ir.IntType(64))

    return types.int64(ref), codegen


@intrinsic
def as_ref(typingctx, addr):
    """The object at ``addr`` as a :data:`pyref` result.  A result hands a reference to the
    caller: the kernel must have taken one for it (``Py_IncRef``, with the GIL held)."""
    if not isinstance(addr, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], _I8P)

    return pyref(addr), codegen
