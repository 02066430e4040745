"""Atomic operations, fences and a nanosecond clock for numba nopython code.

Each helper is a numba ``@intrinsic`` that emits the LLVM instruction itself
(``cmpxchg``, ``atomicrmw``, ``load atomic``, ``store atomic``, ``fence``), so
the worker loops of :mod:`executors.cpu` synchronise exactly like C++
``std::atomic`` code would, with no Python and no locks from a library.

All operate on one element ``arr[i]`` of a 1-d C-contiguous array; integer
arrays (int32/int64) take every operation, float arrays (float32/float64)
take loads, stores, ``fetch_add`` (LLVM ``atomicrmw fadd``) and ``cas_float``
(a compare-exchange on the bit pattern). Indices are not bounds-checked.

Orderings: the plain names are sequentially consistent; ``*_acquire`` /
``*_release`` / ``*_relaxed`` say otherwise.

``compiler_barrier()`` is ``fence syncscope("singlethread") seq_cst``: it emits
no instruction but stops LLVM from caching shared values in registers across
it — an unsynchronised loop (HOGWILD!) needs it, or the "races" happen in
whole-loop chunks instead of element by element, and a spin loop on a plain
load could be hoisted into an infinite loop.
"""

from __future__ import annotations

import platform
from typing import Any

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = [
    "cas",
    "cas_float",
    "compiler_barrier",
    "cpu_relax",
    "exchange",
    "fence",
    "fence_acquire",
    "fence_release",
    "fetch_add",
    "fetch_add_relaxed",
    "load",
    "load_acquire",
    "load_relaxed",
    "now_ns",
    "sched_yield",
    "store",
    "store_relaxed",
    "store_release",
]

_X86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")
CLOCK_MONOTONIC = 1  # Linux value of the clock id (time.h)


def _check_array(arr: types.Type, ops: str) -> None:
    if not isinstance(arr, types.Array) or arr.ndim != 1:
        raise TypeError(f"atomics: expected a 1-d array, got {arr}")
    if ops == "int" and not isinstance(arr.dtype, types.Integer):
        raise TypeError(f"atomics: this operation needs an integer array, got {arr.dtype}")
    if not isinstance(arr.dtype, (types.Integer, types.Float)):
        raise TypeError(f"atomics: unsupported element type {arr.dtype}")


def _ptr(context: Any, builder: Any, aryty: Any, ary: Any, idx: types.Type) -> Any:
    arr = context.make_array(aryty)(context, builder, ary)
    return cgutils.get_item_pointer(context, builder, aryty, arr, [idx], wraparound=False)


def _align(aryty: types.Array) -> int:
    return aryty.dtype.bitwidth // 8


# --- read-modify-write -------------------------------------------------------

@intrinsic
def cas(typingctx: Any, arr: types.Type, i: types.Type, expected: types.Type, new: types.Type) -> tuple[Any, Any]:
    """``old = arr[i]; if old == expected: arr[i] = new; return old`` atomically (seq_cst)."""
    _check_array(arr, "int")
    sig = arr.dtype(arr, types.intp, arr.dtype, arr.dtype)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        ptr = _ptr(context, builder, sig.args[0], args[0], args[1])
        pair = builder.cmpxchg(ptr, args[2], args[3], "seq_cst", "seq_cst")
        return builder.extract_value(pair, 0)

    return sig, codegen


@intrinsic
def cas_float(typingctx: Any, arr: types.Type, i: types.Type, expected: types.Type, new: types.Type) -> tuple[Any, Any]:
    """Compare-exchange on a float element's bits; returns True when it swapped."""
    _check_array(arr, "float")
    if not isinstance(arr.dtype, types.Float):
        raise TypeError("cas_float needs a float array")
    sig = types.boolean(arr, types.intp, arr.dtype, arr.dtype)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        aryty = sig.args[0]
        ity = ir.IntType(aryty.dtype.bitwidth)
        ptr = builder.bitcast(_ptr(context, builder, aryty, args[0], args[1]), ity.as_pointer())
        exp, new = builder.bitcast(args[2], ity), builder.bitcast(args[3], ity)
        pair = builder.cmpxchg(ptr, exp, new, "seq_cst", "seq_cst")
        return builder.extract_value(pair, 1)

    return sig, codegen


def _rmw(op_int: str, op_float: str | None, ordering: str) -> Any:
    def impl(typingctx: Any, arr: types.Type, i: types.Type, v: types.Type) -> Any:
        _check_array(arr, "int" if op_float is None else "any")
        sig = arr.dtype(arr, types.intp, arr.dtype)

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            aryty = sig.args[0]
            ptr = _ptr(context, builder, aryty, args[0], args[1])
            op = op_float if isinstance(aryty.dtype, types.Float) else op_int
            return builder.atomic_rmw(op, ptr, args[2], ordering)

        return sig, codegen

    return intrinsic(impl)


fetch_add = _rmw("add", "fadd", "seq_cst")
fetch_add.__doc__ = "``old = arr[i]; arr[i] += v; return old`` atomically (seq_cst); floats use ``atomicrmw fadd``."
fetch_add_relaxed = _rmw("add", "fadd", "monotonic")
exchange = _rmw("xchg", "xchg", "seq_cst")


# --- loads and stores --------------------------------------------------------

def _load(ordering: str) -> Any:
    def impl(typingctx: Any, arr: types.Type, i: types.Type) -> Any:
        _check_array(arr, "any")
        sig = arr.dtype(arr, types.intp)

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            aryty = sig.args[0]
            ptr = _ptr(context, builder, aryty, args[0], args[1])
            return builder.load_atomic(ptr, ordering, _align(aryty))

        return sig, codegen

    return intrinsic(impl)


def _store(ordering: str) -> Any:
    def impl(typingctx: Any, arr: types.Type, i: types.Type, v: types.Type) -> Any:
        _check_array(arr, "any")
        sig = types.void(arr, types.intp, arr.dtype)

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            aryty = sig.args[0]
            ptr = _ptr(context, builder, aryty, args[0], args[1])
            builder.store_atomic(args[2], ptr, ordering, _align(aryty))
            return context.get_dummy_value()

        return sig, codegen

    return intrinsic(impl)


load, load_acquire, load_relaxed = _load("seq_cst"), _load("acquire"), _load("monotonic")
store, store_release, store_relaxed = _store("seq_cst"), _store("release"), _store("monotonic")


# --- fences ------------------------------------------------------------------

def _fence(ordering: str, scope: str | None = None) -> Any:
    def impl(typingctx: Any) -> Any:
        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            builder.fence(ordering, scope)
            return context.get_dummy_value()

        return types.void(), codegen

    return intrinsic(impl)


fence, fence_acquire, fence_release = _fence("seq_cst"), _fence("acquire"), _fence("release")
compiler_barrier = _fence("seq_cst", "singlethread")


# --- clock, pause, yield -----------------------------------------------------

@intrinsic
def now_ns(typingctx: Any) -> tuple[Any, Any]:
    """Nanoseconds of ``clock_gettime(CLOCK_MONOTONIC)`` (libc, called directly from the compiled code)."""
    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        i64, i32 = ir.IntType(64), ir.IntType(32)
        ts_t = ir.LiteralStructType([i64, i64])  # struct timespec on 64-bit Linux
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, [i32, ts_t.as_pointer()]),
                                            "clock_gettime")
        ts = cgutils.alloca_once(builder, ts_t)
        builder.call(fn, [i32(CLOCK_MONOTONIC), ts])
        sec = builder.load(cgutils.gep_inbounds(builder, ts, 0, 0))
        nsec = builder.load(cgutils.gep_inbounds(builder, ts, 0, 1))
        return builder.add(builder.mul(sec, i64(1_000_000_000)), nsec)

    return types.int64(), codegen


@intrinsic
def cpu_relax(typingctx: Any) -> tuple[Any, Any]:
    """The spin-wait hint (x86 ``pause``); elsewhere only a compiler barrier."""
    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        if _X86:
            # The LLVM intrinsic, not inline asm: numba's JIT has no assembler parser.
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                                "llvm.x86.sse2.pause")
            builder.call(fn, [])
        else:
            builder.fence("seq_cst", "singlethread")
        return context.get_dummy_value()

    return types.void(), codegen


@intrinsic
def sched_yield(typingctx: Any) -> tuple[Any, Any]:
    """Give the core away (libc ``sched_yield``): spinners must, when threads outnumber cores."""
    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(32), []), "sched_yield")
        builder.call(fn, [])
        return context.get_dummy_value()

    return types.void(), codegen


@njit(nogil=True, cache=True)
def clock_ns() -> int:
    """``now_ns()`` callable from Python too (the monitor uses the same clock as the workers)."""
    return now_ns()
