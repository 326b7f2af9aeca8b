"""Executes printed MLIR GPU IR (as `moe-opt --convert-moe-to-gpu` prints it) on the CPU.

Every SSA value of a kernel is an array of 32 lanes, a row per warp; the
threads of a launch run in lockstep (op i for all of them before op i + 1,
a valid schedule of a race-free program), blocks in chunks one after
another. Divergent `scf.if` and `scf.for` run masked. Memory is numpy
arrays (`Buffer`): loads and stores are bounds checked, reads of elements
never written raise, and a race detector (`Races`) reports two threads
touching one element, one of them writing, with no `gpu.barrier` (same
block) or `nvvm.bar.warp.sync` (same warp) between them. Collective ops
check that they are reached uniformly: `gpu.barrier` by all threads of a
block or none, the warp ops by all 32 lanes of a warp.

`run_function` interprets a whole function on the host (allocations, host
`scf.if`/`scf.for`, launches in sequence); `launch` runs one `gpu.launch`
given its buffers. Errors of the program raise `KernelError`; an op the
interpreter does not know raises NotImplementedError.

Two streams (`Streams`): launches named `moe_side_stream` run on a side
stream that `moertGpuForkSide` orders after the stream's work so far and
`moertGpuJoinSide` orders the stream after (moe-gpu-side-stream). The
launches still run in program order, but every workspace byte remembers
which stream wrote it and read it last, at which launch; a kernel touching
bytes the other stream wrote (or read, when it writes) with no fork or
join between them races on a GPU, and so does an entry that returns with
side work not joined.

Tensor cores: `nvvm.mma.sync` m16n8k16 row.col bf16 x bf16 + f32 (the PTX
ISA's fragment layout, tensor_cores.MMA_M16N8K16; whole warps only), with the vector ops
around it (vector.bitcast, extract, insert, from_elements, splat) and
`llvm.extractvalue`; `nvgpu.ldmatrix` (x1/x2/x4, .trans) and cp.async
(`nvgpu.device_async_copy` lands when a `device_async_wait` completes its
group, the race detector seeing its write from the copy on), dynamic shared
memory (`dynamic_shared_memory_size`, `gpu.dynamic_shared_memory`,
`memref.view`: each view its own record of writes and races).

Hopper: `nvvm.wgmma.mma_async` m64nNk16 bf16 and m64nNk32 E4M3 with both
operands in shared memory, K-major with the 128-byte swizzle, read through
their descriptors at the addresses the hardware computes (the dynamic shared
memory lies at SHARED_BASE, not 1024-aligned); the warpgroup's rules
checked: whole warpgroups, `wgmma.fence` before the products after a wait,
`fence.proxy.async` between shared memory writes and the products reading
them, accumulators not read before the `wgmma.wait.group` that completes
their group, operands not overwritten before it (race detector), no product
left in flight at the kernel's end. E4M3 conversions (cvt.rn.satfinite),
FMA, vector shuffles and reductions. tensor_cores.py holds the arithmetic
and layouts.
"""
import json
import math
import re
import types

import numpy as np

import tensor_cores as tc

BF16 = tc.BF16
DTYPE = {"index": np.int64, "i64": np.int64, "i32": np.int32, "i16": np.int16, "i8": np.int8,
         "i1": np.bool_, "f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": BF16,
         "!llvm.ptr": np.int64}  # a pointer is its address
# Elements nobody wrote: a NaN for floats (bits 0x7FBA..., 0x7FBADBAD...), large for ints.
POISON = 0x7FBADBAD7FBADBAD
# Lanes a chunk of blocks holds at most (bounds the arrays of big grids).
CHUNK_THREADS = 1 << 18
# CUDA's limits: threads a block, static shared memory a block, grid extents.
MAX_BLOCK_THREADS, MAX_STATIC_SHARED = 1024, 48 * 1024
# Shared memory a block may have in all with the opt-in attribute (H100, H200).
MAX_SHARED = 227 * 1024
MAX_GRID = (2**31 - 1, 65535, 65535)
# The shared memory address of a block's dynamic shared memory: 16-byte
# aligned as CUDA promises, not 1024 (a wgmma kernel must align its
# swizzled stages itself).
SHARED_BASE = 1024 + 16
MAX_BLOCK = (1024, 1024, 64)


class KernelError(RuntimeError):
    """The program is wrong: a race, an uninitialised read, a divergent
    barrier, an access out of bounds, an invalid launch."""


# --- Parsing -----------------------------------------------------------------

class Op:
    """One printed op: name, results, operand names, leading words, type, regions."""

    def __init__(self, text):
        self.text, self.regions = text, []
        m = re.match(r"(?:(%[^=]+?) = )?([a-z_]\w*(?:\.\w+)+|return|call)\s*(.*)$", text)
        if not m:
            raise ValueError(f"cannot parse: {text}")
        self.results = []
        for r in m.group(1).split(", ") if m.group(1) else []:  # %a, %b or %a:3
            name, _, count = r.partition(":")
            self.results += [f"{name}#{i}" for i in range(int(count))] if count else [name]
        self.name, rest = m.group(2), m.group(3)
        self.name = {"return": "func.return", "call": "func.call"}.get(self.name, self.name)
        self.body, _, self.type = rest.rpartition(" : ") if " : " in rest else (rest, "", "")
        self.operands = re.findall(r"%[\w#-]+", self.body)
        self.words = re.findall(r"(?<![%\w#.])[a-z_]+\b", self.body.split("%")[0])


def parse_region(lines, i):
    """Ops from lines[i] up to the closing '}' (or '} else {'); returns (ops, i)."""
    ops = []
    while i < len(lines) and not lines[i].strip().startswith("}"):
        line = lines[i].strip()
        op, i = Op(line.removesuffix(" {")), i + 1
        while line.endswith("{"):  # its regions, the next one after '} else {'
            region, i = parse_region(lines, i)
            op.regions.append(region)
            line, i = lines[i].strip(), i + 1
        ops.append(op)
    return ops, i


def parse_function(text, name):
    """(argument names, body ops) of `func.func @name`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if f"func.func @{name}(" in line)
    return re.findall(r"(%\w+): ", lines[start]), parse_region(lines, start + 1)[0]


def split_kernel(text, func):
    """(the function's top-level ops above the last launch by result name, that
    launch with its body parsed, the function's argument names)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if f"func.func @{func}" in line)
    last = max(i for i, line in enumerate(lines) if "gpu.launch " in line)
    outer, depth = {}, 0
    for line in lines[start + 1:last]:
        if depth == 0 and line.strip().startswith("%"):
            op = Op(line.strip())
            outer.update((r, op) for r in op.results)
        depth += line.rstrip().endswith("{") - line.strip().startswith("}")
    kernel = Op(lines[last].strip().removesuffix(" {"))
    kernel.regions.append(parse_region(lines, last + 1)[0])
    return outer, kernel, re.findall(r"(%arg\d+):", lines[start])


def memref_type(text):
    """(shape with None for '?', element type name, vector width or 1) of a
    memref type, or of 'memref<...>, vector<Nx...>'."""
    m = re.match(r"memref<((?:[?\d]+x)*)(\w+)", text)
    if not m:
        raise NotImplementedError(f"type {text}")
    shape = tuple(None if d == "?" else int(d) for d in m.group(1).split("x")[:-1])
    v = re.search(r"vector<(\d+)x\w+>", text)
    return shape, m.group(2), int(v.group(1)) if v else 1


def _value(o):
    return o.v if isinstance(o, Affine) else o


class Affine:
    """An index value in an affine expression: floordiv floors, mod is
    non-negative, ceildiv (written @, of *'s precedence) rounds up."""

    def __init__(self, v):
        self.v = np.asarray(v, np.int64)

    def __add__(self, o):
        return Affine(self.v + _value(o))

    def __sub__(self, o):
        return Affine(self.v - _value(o))

    def __rsub__(self, o):
        return Affine(_value(o) - self.v)

    def __mul__(self, o):
        return Affine(self.v * _value(o))

    def __neg__(self):
        return Affine(-self.v)

    def __floordiv__(self, o):
        return Affine(self.v // _value(o))

    def __mod__(self, o):
        return Affine(self.v % _value(o))

    def __matmul__(self, o):
        return Affine(-(-self.v // _value(o)))

    __radd__, __rmul__ = __add__, __mul__


AFFINE_MAPS = {}  # '#map' -> f(dims and symbols, in order) of the module being run
GLOBALS = {}  # name -> array: the module's constant memref.globals


def parse_globals(text):
    """`memref.global ... constant @name : memref<...> = dense<...>` of the module."""
    out = {}
    for name, ty, value in re.findall(r'memref\.global "\w+" constant @([\w.]+) : '
                                      r'(memref<[^>]*>) = dense<(.*?)>(?: \{.*\})?$', text, re.M):
        shape, elem, _ = memref_type(ty)
        values = np.array(json.loads(value) if value.startswith("[") else float(value))
        out[name] = np.broadcast_to(values, shape).astype(DTYPE[elem]).copy()
    return out


def parse_affine_maps(text):
    """The module's `#name = affine_map<(d...)[s...] -> (expr)>` of one result."""
    maps = {}
    for name, dims, symbols, expr in re.findall(
            r"^(#\w+) = affine_map<\(([^)]*)\)(?:\[([^\]]*)\])? -> \(([^,]*?)\)>$", text,
            re.M):
        names = [n.strip() for n in (dims + "," + (symbols or "")).split(",") if n.strip()]
        body = re.sub(r"\bceildiv\b", "@", re.sub(r"\bfloordiv\b", "//",
                                                   re.sub(r"\bmod\b", "%", expr)))
        if not re.fullmatch(r"[\w\s+\-*/%@()]*", body):
            continue
        code = compile(body, name, "eval")
        maps[name] = (lambda code, names: lambda values: eval(  # noqa: S307 (our own IR)
            code, {}, {n: Affine(v) for n, v in zip(names, values)}).v)(code, names)
    return maps


def struct_fields(text):
    """The field types of '!llvm.struct<(f32, f32, ...)>' (all alike)."""
    m = re.fullmatch(r"\s*!llvm\.struct<\(([\w, ]*)\)>\s*", text)
    fields = [f.strip() for f in m.group(1).split(",")] if m else []
    if not fields or len(set(fields)) != 1 or fields[0] not in DTYPE:
        raise NotImplementedError(f"a struct not of one element type: {text}")
    return fields


def element_type(text):
    """The element type name of 'f32', 'vector<8xbf16>', an LLVM struct of one
    type, 'a to b' or 'a, b' (the last)."""
    if "!llvm.struct<(" in text:
        return struct_fields(text[text.rindex("!llvm.struct<("):])[0]
    text = text.split(" to ")[-1].split(", ")[-1].strip()
    m = re.fullmatch(r"vector<(?:\d+x)+(\w+)>", text)
    return m.group(1) if m else text


LAUNCH = re.compile(r"gpu\.launch blocks\((.*?)\) in \((.*?)\) threads\((.*?)\) in \((.*?)\)"
                    r"(?: workgroup\((.*)\))?")


class LaunchForm:
    """A printed `gpu.launch`: block and thread id names, the size names
    inside and the host values they are bound to, the workgroup buffers."""

    def __init__(self, op):
        # `dynamic_shared_memory_size %v` (bytes, i32): the name of the host value, or None.
        dynamic = re.search(r" dynamic_shared_memory_size (%[\w-]+)", op.text)
        self.dynamic_shared = dynamic.group(1) if dynamic else None
        m = LAUNCH.fullmatch(op.text.replace(dynamic.group(0), "") if dynamic else op.text)
        if not m:
            raise NotImplementedError(f"the launch form: {op.text}")
        self.block_ids = re.findall(r"%[\w-]+", m.group(1))
        self.thread_ids = re.findall(r"%[\w-]+", m.group(3))
        self.grid = re.findall(r"(%[\w-]+) = (%[\w-]+)", m.group(2))
        self.block = re.findall(r"(%[\w-]+) = (%[\w-]+)", m.group(4))
        self.workgroup = re.findall(r"(%[\w-]+) : (memref<.*?#gpu\.address_space<workgroup>>)",
                                    m.group(5) or "")
        if (m.group(5) or "").count(" : ") != len(self.workgroup):
            raise NotImplementedError(f"workgroup attributions: {m.group(5)}")


# --- Arithmetic ---------------------------------------------------------------

def uniform(v, mask, what):
    active = v[mask]
    if active.size == 0 or (active != active.flat[0]).any():
        raise KernelError(f"{what} is not uniform over the active lanes")
    return active.flat[0].item()


def unsigned(a):
    return a.view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype.kind == "i" else a


def select(c, a, b):
    """arith.select / a masked merge: c per lane, a and b maybe vectors."""
    c = c.reshape(c.shape + (1,) * (np.ndim(a) - c.ndim))
    return np.where(c, a, b)


def cmpf(pred, a, b):
    ordered = ~np.isnan(a) & ~np.isnan(b)
    if pred in ("ord", "uno"):
        return ordered if pred == "ord" else ~ordered
    base = {"eq": a == b, "gt": a > b, "ge": a >= b, "lt": a < b, "le": a <= b, "ne": a != b}
    return base[pred[1:]] & ordered if pred[0] == "o" else base[pred[1:]] | ~ordered


def cmpi(pred, a, b):
    if pred[0] == "u":
        a, b = unsigned(a), unsigned(b)
    return {"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b,
            "ge": a >= b}[pred[1:] if pred[0] in "su" else pred]


def divide(a, b, signed=False, ceil=False, rem=False):
    """Integer division (truncating when signed); x / 0 gives junk, not an error."""
    if signed:
        q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
        return np.where((a < 0) != (b < 0), -q, q)
    ua, ub = unsigned(a), np.maximum(unsigned(b), 1)
    return (ua % ub if rem else ua // ub + (ceil & (ua % ub != 0))).view(a.dtype)


def shift(a, b, kind):
    """shli, shrui, shrsi; a shift by the bit width or more gives 0 (poison in MLIR)."""
    bits = 8 * a.dtype.itemsize
    ok = (unsigned(b) < bits)
    b = np.where(ok, b, 0).astype(a.dtype)
    out = {"l": np.left_shift(a, b), "ru": np.right_shift(unsigned(a), unsigned(b)).view(a.dtype),
           "rs": np.right_shift(a, b)}[kind]
    return np.where(ok, out, 0)


def ctpop(a):
    return np.bitwise_count(unsigned(a)).astype(a.dtype)


ARITH = {  # name -> f(operands) on lane arrays; the result is cast to the op's type
    "arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b,
    "arith.muli": lambda a, b: a * b, "arith.divsi": lambda a, b: divide(a, b, signed=True),
    "arith.divui": divide, "arith.ceildivui": lambda a, b: divide(a, b, ceil=True),
    "arith.remui": lambda a, b: divide(a, b, rem=True),
    "arith.minui": lambda a, b: np.minimum(unsigned(a), unsigned(b)).view(a.dtype),
    "arith.maxui": lambda a, b: np.maximum(unsigned(a), unsigned(b)).view(a.dtype),
    "arith.minsi": np.minimum, "arith.maxsi": np.maximum,
    "arith.shli": lambda a, b: shift(a, b, "l"), "arith.shrui": lambda a, b: shift(a, b, "ru"),
    "arith.shrsi": lambda a, b: shift(a, b, "rs"),
    "arith.andi": lambda a, b: a & b, "arith.ori": lambda a, b: a | b,
    "arith.xori": lambda a, b: a ^ b, "arith.select": select,
    "arith.addf": lambda a, b: a + b, "arith.subf": lambda a, b: a - b,
    "arith.mulf": lambda a, b: a * b, "arith.divf": lambda a, b: a / b,
    "arith.negf": lambda a: -a, "arith.maximumf": np.maximum, "arith.maxnumf": np.fmax,
    "arith.minimumf": np.minimum, "arith.minnumf": np.fmin,
    "math.exp": np.exp, "arith.index_cast": lambda a: a,
    "arith.index_castui": unsigned, "arith.extsi": lambda a: a, "arith.trunci": lambda a: a,
    "arith.extui": lambda a: a if a.dtype == np.bool_ else unsigned(a),
    "arith.extf": lambda a: a, "arith.truncf": lambda a: a,  # bf16 <-> f32 by the cast
    "math.ctpop": ctpop, "llvm.intr.ctpop": ctpop, "math.absf": np.abs,
    # One rounding of the exact product (float64 holds it) plus c: a double
    # rounding may differ from a fused one in the last bit, rarely.
    "math.fma": lambda a, b, c: a.astype(np.float64) * b + c,
    "arith.cmpi": cmpi, "arith.cmpf": cmpf,
    "llvm.select": select, "llvm.inttoptr": lambda a: a,  # pointers are int64 here
}


def poison(shape, dtype):
    """An array of the poison pattern (NaN for floats)."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return np.ones(shape, bool)
    return np.full(shape, POISON >> (64 - 8 * dtype.itemsize), f"u{dtype.itemsize}").view(dtype)


# --- Memory -------------------------------------------------------------------

class Buffer:
    """A memref's elements. `init`: which were written (None: all given);
    `writes`: stores per element; `per_block`: workgroup memory, axis 0 the
    block of a chunk."""

    def __init__(self, array, name, initialised=True, read_only=False, per_block=False):
        self.array, self.name, self.read_only, self.per_block = array, name, read_only, per_block
        self.init = None if initialised else np.zeros(array.shape, bool)
        self.writes = self.unfenced = None
        # Shared memory: its address (dynamic shared memory and its views),
        # a view's byte offset in the dynamic shared memory.
        self.address = self.byte_offset = None
        # A view of a global byte buffer (a workspace): (that buffer, view
        # number); per byte of a byte buffer the view that wrote it last
        # (`owner`) and the views by number.
        self.bytes, self.owner, self.views = None, None, []
        # The entry's argument this buffer is (a view of), for the streams'
        # order (Streams.access); None inside a lone kernel.
        self.root = None

    @property
    def shape(self):
        return self.array.shape[1:] if self.per_block else self.array.shape

    def alias(self, view, name):
        """The same elements in another shape or a part of them (memref.cast,
        expand_shape, collapse_shape, subview): `view` maps an array of this
        buffer's shape to the alias's; one record of writes for both."""
        if self.writes is None:
            self.writes = np.zeros(self.array.shape, np.int64)
        other = Buffer(view(self.array), name, read_only=self.read_only, per_block=self.per_block)
        other.init = None if self.init is None else view(self.init)
        other.writes = view(self.writes)
        other.bytes, other.address, other.root = self.bytes, self.address, self.root
        return other

    def bytes_in(self, base, index):
        """The bytes of the elements at `index`, as offsets in `base` (the
        buffer this one is a view of)."""
        start = self.array.__array_interface__["data"][0] - base.array.__array_interface__[
            "data"][0]
        at = start + sum(np.asarray(i, np.int64) * s for i, s in zip(
            np.broadcast_arrays(*index), self.array.strides))
        return (at.ravel()[:, None] + np.arange(self.array.itemsize)).ravel()

    def check_bytes(self, index, write, op):
        """A view of a workspace: a write makes its bytes this view's; a read
        of bytes another view wrote since this one did means two buffers the
        plan keeps alive at once share memory. With two streams, also the
        order between them (Streams.access)."""
        ordered = STREAMS.side and self.root is not None
        if self.bytes is None and not ordered:
            return
        if ordered:
            STREAMS.access(self.root, self.bytes_in(self.root, index), write, self.name, op)
        if self.bytes is None:
            return
        base, number = self.bytes
        byte = self.bytes_in(base, index)
        if base.owner is None:
            base.owner = np.full(base.array.shape, -1, np.int64)
        if write:
            base.owner[byte] = number
            return
        other = base.owner[byte]
        bad = (other >= 0) & (other != number)
        if bad.any():
            raise KernelError(f"{self.name} reads workspace bytes "
                              f"{int(byte[bad][0])}.. that {base.views[other[bad][0]]} wrote "
                              f"since: two live buffers overlap: {op.text}")


def has_duplicates(flat):
    """Whether an element appears twice (a sort: numpy's hashing np.unique
    is several times slower on these arrays)."""
    s = np.sort(flat, axis=None)
    return bool((s[1:] == s[:-1]).any())


def written(buffer, index, values):
    """Stores values (by a generic-proxy write: a store or a landing cp.async)
    and notes it: written, how often, and, in shared memory, not yet fenced
    for the async proxy (wgmma)."""
    buffer.array[index] = values
    if buffer.init is not None:
        buffer.init[index] = True
    if buffer.writes is None:
        buffer.writes = np.zeros(buffer.array.shape, np.int64)
    buffer.writes[index] += 1
    if buffer.per_block:
        if buffer.unfenced is None:
            buffer.unfenced = np.zeros(buffer.array.shape, bool)
        buffer.unfenced[index] = True


def root_bytes(buffer):
    """The bytes of an entry's argument, flat (a view)."""
    return buffer.array.reshape(-1).view(np.uint8)


class Streams:
    """The entry's stream (0) and side stream (1) as vector clocks:
    clock[s][t] is the first launch of stream t that stream s has not waited
    for (clock[s][s]: the next launch of s). Per byte of an argument (the
    workspace's too): the stream and launch that wrote it last, and per
    stream the last launch that read it. Launch 0 of the entry's stream is
    the caller's work before the call, which wrote every argument (the
    inputs, and the workspace a previous call used)."""

    NAMES = ("the entry's", "the side")

    def __init__(self):
        self.clock = np.array([[1, 0], [0, 0]], np.int64)
        self.side = False  # moertGpuSideStream was called
        self.current = None  # (stream, launch) running

    def fork(self):  # the side stream waits for the stream's work so far
        self.clock[1] = np.maximum(self.clock[1], self.clock[0])

    def join(self):  # the stream waits for the side stream's
        self.clock[0] = np.maximum(self.clock[0], self.clock[1])

    def begin(self, stream):
        self.current = (stream, int(self.clock[stream][stream]))

    def end(self):
        stream, _ = self.current
        self.clock[stream][stream] += 1
        self.current = None

    def access(self, base, byte, write, name, op):
        if self.current is None:
            return
        if getattr(base, "order", None) is None:  # written by the caller
            n = base.array.nbytes
            base.order = dict(writer=np.zeros(n, np.int8), wrote=np.zeros(n, np.int64),
                              read=np.full((2, n), -1, np.int64))
        order = base.order
        stream, at = self.current
        other = 1 - stream
        seen = self.clock[stream][other]  # the other stream's launches before it are done
        unordered = (order["writer"][byte] == other) & (order["wrote"][byte] >= seen)
        what, launches = "wrote", order["wrote"]
        if write and not unordered.any():
            unordered, what, launches = order["read"][other][byte] >= seen, "read", order["read"][
                other]
        if unordered.any():
            first = int(byte[unordered][0])
            who = ("the caller's work before the call" if other == 0 and launches[first] == 0
                   else f"a kernel or runtime call on {self.NAMES[other]} stream")
            raise KernelError(f"{name} ({self.NAMES[stream]} stream) "
                              f"{'writes' if write else 'reads'} bytes {first}.. of {base.name} "
                              f"that {who} {what}, with no fork or join between them: {op.text}")
        if write:
            order["writer"][byte], order["wrote"][byte] = stream, at
        else:
            order["read"][stream][byte] = at


STREAMS = Streams()


class Races:
    """Happens-before race detection over a launch. Each block counts the
    barriers it passed, each warp its warp syncs (epochs). An access by
    thread t is ordered after an earlier one made by t itself, by t's block
    in an epoch t's block has left since, or by t's warp in a warp epoch it
    has left since; else, with a write among the two, they race. Per
    element: the last write (thread, warp, block and their epochs then) and
    the reads not ordered before a later read (thread, warp, block: one, or
    -2 for several; the latest epochs). -1: none. A row of 10 int32 per
    element (one gather per access: the race checks dominate emulation
    time)."""
    T, W, B, WE, BE = range(5)  # a write's fields; the reads' are 5 further

    def __init__(self, threads_per_block, warps_per_block, blocks):
        if threads_per_block * blocks >= 2**31:
            raise NotImplementedError("launches of 2^31 threads or more")
        self.tpb, self.shadows = threads_per_block, {}
        self.block_epoch = np.zeros(blocks, np.int64)
        self.warp_epoch = np.zeros(blocks * warps_per_block, np.int64)

    def shadow(self, buffer):
        if id(buffer) not in self.shadows:
            self.shadows[id(buffer)] = (buffer, np.full((buffer.array.size, 10), -1, np.int32))
        return self.shadows[id(buffer)][1]

    def forget(self, buffer):
        self.shadows.pop(id(buffer), None)

    def barrier(self, blocks):
        self.block_epoch[blocks] += 1

    def warp_sync(self, warps):
        self.warp_epoch[warps] += 1

    def ordered(self, rec, now):
        """Per access `now` (a column of its thread, warp, block and their
        epochs): whether the access recorded in its row of `rec` comes
        before it. Most are by nobody or the same thread: the epochs are
        compared for the others only."""
        ok = (rec[:, self.T] == -1) | (rec[:, self.T] == now[self.T])
        rest = np.flatnonzero(~ok)
        if rest.size:
            r, n = rec[rest].T, now[:, rest]
            ok[rest] = (((r[self.B] == n[self.B]) & (r[self.BE] < n[self.BE]))
                        | ((r[self.W] == n[self.W]) & (r[self.WE] < n[self.WE])))
        return ok

    def who(self, thread):
        return f"thread {thread % self.tpb} of block {thread // self.tpb}"

    def access(self, buffer, flat, who, write, op):
        """Checks and records accesses to elements `flat` by threads `who`
        (thread, warp, block arrays alike)."""
        s = self.shadow(buffer)
        t, w, b = who
        now = np.stack([t, w, b, self.warp_epoch[w], self.block_epoch[b]]).astype(np.int32)
        seen = s[flat]
        after_write = self.ordered(seen[:, :5], now)
        after_reads = self.ordered(seen[:, 5:], now)
        bad = np.flatnonzero(~after_write | (write & ~after_reads))
        if bad.size:
            i = bad[0]
            index = np.unravel_index(flat[i], buffer.array.shape)[buffer.per_block:]
            row = 0 if not after_write[i] else 5
            other = seen[i, row + self.T]
            earlier = ("several threads" if other == -2 else self.who(other)) + (
                " read" if row else " wrote")
            raise KernelError(f"race on {buffer.name}{list(map(int, index))}: "
                              f"{self.who(who[0][i])} {'writes' if write else 'reads'} it, "
                              f"{earlier} it, no barrier or warp sync between ({bad.size} such): "
                              f"{op.text}")
        if write:  # what came before is ordered before this write
            s[flat] = np.concatenate([now, np.full_like(now, -1)]).T
            return
        order = np.argsort(flat, kind="stable")
        f, now, after_reads = flat[order], now[:, order], after_reads[order]
        starts = np.flatnonzero(np.r_[True, f[1:] != f[:-1]])
        new = np.maximum.reduceat(now, starts, axis=1)  # the epochs
        for row in (self.T, self.W, self.B):  # one thread (warp, block), or several
            same = np.minimum.reduceat(now[row], starts) == new[row]
            new[row] = np.where(same, new[row], -2)
        old = s[f[starts], 5:].T
        merged = np.maximum(old, new)
        merged[:3] = np.where(old[:3] == new[:3], new[:3], -2)
        # Reads ordered before each of the new ones drop out of the record.
        replace = np.logical_and.reduceat(after_reads, starts)
        s[f[starts], 5:] = np.where(replace, new, merged).T


class Geometry:
    """The threads of a chunk of blocks: a row per warp of each block; per
    lane its thread ids, block ids, whether it exists, and its global
    thread, warp and block number (for the race detector)."""

    def __init__(self, blocks, grid, block):
        self.tpb = math.prod(block)
        self.wpb = -(-self.tpb // 32)
        self.blocks = blocks  # global linear ids, x fastest
        self.block_row = np.repeat(np.arange(len(blocks)), self.wpb)  # chunk-local block
        self.shape = (len(self.block_row), 32)
        b = blocks[self.block_row][:, None] + np.zeros((1, 32), np.int64)
        warp = (np.arange(self.shape[0]) % self.wpb)[:, None]
        linear = warp * 32 + np.arange(32)[None, :]
        self.exists = linear < self.tpb
        self.lane = np.broadcast_to(np.arange(32, dtype=np.int64), self.shape)
        self.tid = (linear % block[0], linear // block[0] % block[1],
                    linear // (block[0] * block[1]))
        self.bid = (b % grid[0], b // grid[0] % grid[1], b // (grid[0] * grid[1]))
        self.grid, self.block = grid, block
        self.ids = (b * self.tpb + linear, b * self.wpb + warp + 0 * linear, b)


# --- The interpreter ------------------------------------------------------------

class Threads:
    """Runs ops for threads in lockstep: values are arrays of `shape` (a row
    per warp, 32 lanes; (1, 1) on the host), with trailing vector axes;
    `mask` the active lanes. Values not defined here come from `parent` (the
    host) or by running the op that defines them in `outer`."""

    def __init__(self, buffers, shape=(1, 1), parent=None, outer=None, dims=None, geometry=None,
                 races=None):
        self.buffers, self.shape, self.parent = buffers, shape, parent
        self.outer, self.dims, self.geometry, self.races = outer or {}, dims or {}, geometry, races
        self.env = {}
        self.everywhere = geometry.exists if geometry else np.ones(shape, bool)

    def get(self, name):
        if name not in self.env:
            if self.parent is not None:
                v = self.parent.get(name)
                self.env[name] = np.broadcast_to(v[0, 0], self.shape + v.shape[2:])
            elif name in self.outer:  # defined above the launch: a uniform value
                self.exec(self.outer[name], self.everywhere)
            else:
                raise KeyError(f"value {name} is not defined")
        return self.env[name]

    def full(self, value, dtype, vector=()):
        return np.full(self.shape + tuple(vector), value, dtype)

    def run(self, ops, mask):
        """Runs a region; returns the values its scf.yield passes on (or [])."""
        for op in ops:
            if op.name in ("scf.yield", "gpu.terminator"):
                return [self.buffers[v] if v not in self.env and v in self.buffers
                        else self.get(v) for v in op.operands]
            self.exec(op, mask)
        return []

    def exec(self, op, mask):
        handler = getattr(self, "op_" + op.name.replace(".", "_"), None)
        if handler:
            return handler(op, mask)
        if op.name not in ARITH:
            raise NotImplementedError(f"the interpreter does not know {op.name}: {op.text}")
        args = [self.get(v) for v in op.operands]
        if op.name in ("arith.cmpi", "arith.cmpf"):  # i1 results
            self.env[op.results[0]] = ARITH[op.name](op.words[0], *args)
        else:
            result_type = DTYPE[element_type(op.type)]
            self.env[op.results[0]] = ARITH[op.name](*args).astype(result_type)

    # Values and control flow.

    def op_arith_constant(self, op, mask):
        text, ty, vector = op.body.strip(), op.type, ()
        if text in ("true", "false"):
            self.env[op.results[0]] = self.full(text == "true", np.bool_)
            return
        if m := re.fullmatch(r"dense<([^\[\]]*)>", text):
            text = m.group(1)
        if m := re.fullmatch(r"vector<(\d+)x(\w+)>", ty):
            vector, ty = (int(m.group(1)),), m.group(2)
        if ty not in DTYPE:
            raise NotImplementedError(f"constant {op.text}")
        dtype = np.dtype(DTYPE[ty])
        if text.startswith("0x"):  # NaN, infinities
            value = np.array(int(text, 16), f"u{dtype.itemsize}").view(dtype)
        else:
            value = float(text) if dtype.kind == "f" or dtype == BF16 else int(text)
        self.env[op.results[0]] = self.full(value, dtype, vector)

    def op_tensor_dim(self, op, mask):  # of an argument: its extent
        dim = uniform(self.get(op.operands[1]), self.everywhere, op.text)
        self.env[op.results[0]] = self.full(self.dims[op.operands[0]][dim], np.int64)

    def op_scf_if(self, op, mask):
        cond = self.get(op.operands[0])
        masks = (mask & cond, mask & ~cond)
        outs = [self.run(region, m) if m.any() else None for region, m in zip(op.regions, masks)]
        for i, name in enumerate(op.results):  # a branch no lane ran yields junk
            values = [o[i] if o else None for o in outs]
            fill = next(v for v in values if v is not None)
            if isinstance(fill, Buffer):  # a memref: the branch taken, uniformly
                uniform(cond, mask, f"the condition of an scf.if yielding a memref: {op.text}")
                self.buffers[name] = fill
                continue
            self.env[name] = select(cond, *(fill if v is None else v for v in values))

    def op_scf_for(self, op, mask):
        """A loop; lanes may run different trip counts (bounds per lane)."""
        iv, lb, ub, step = op.operands[:4]
        inners, values = op.operands[4::2], [self.get(v) for v in op.operands[5::2]]
        i, end, st = (self.get(v) for v in (lb, ub, step))
        if (st[mask] <= 0).any():
            raise KernelError(f"a step not positive: {op.text}")
        active = mask & (i < end)
        while active.any():
            self.env[iv] = i
            self.env.update(zip(inners, values))
            new = self.run(op.regions[0], active)
            # A product in flight stays so through the loop's iteration arguments.
            values = [in_flight(select(active, n, v), n.record) if getattr(n, "record", None)
                      else select(active, n, v) for n, v in zip(new, values)]
            i = np.where(active, i + st, i)
            active &= i < end
        self.env.update(zip(op.results, values))

    # Memory.

    def address(self, op, names, mask, width=None):
        """The buffer and the active lanes' indices (a trailing axis of
        `width` for a vector), bounds checked."""
        buffer = self.buffers[names[0]]
        shape, elem, _ = memref_type(op.type)
        if DTYPE[elem] != buffer.array.dtype or len(names) - 1 != len(buffer.shape):
            raise TypeError(f"{op.text} does not fit buffer {buffer.array.dtype}{buffer.shape}")
        index = [self.get(i)[mask] for i in names[1:]]
        if width is not None:
            index = [i[:, None] for i in index[:-1]] + [index[-1][:, None] + np.arange(width)]
        for d, ix in enumerate(index):
            out = (ix < 0) | (ix >= buffer.shape[d])
            if out.any():
                first = [int(i[out][0]) for i in np.broadcast_arrays(*index)]
                raise KernelError(f"out of bounds: {op.text} at {first} of {buffer.name}"
                                  f"{list(buffer.shape)} ({int(out.sum())} lanes)")
        if buffer.per_block:
            rows = np.broadcast_to(self.geometry.block_row[:, None], self.shape)[mask]
            index = [rows.reshape(rows.shape + (1,) * (width is not None))] + index
        return buffer, tuple(index)

    def record(self, buffer, index, mask, write, op):
        """Hands the accesses to the race detector (on the device)."""
        buffer.check_bytes(index, write, op)
        if self.races is None or buffer.read_only:
            return
        flat = np.ravel_multi_index(np.broadcast_arrays(*index), buffer.array.shape)
        who = [np.broadcast_to(v[mask].reshape((-1,) + (1,) * (flat.ndim - 1)), flat.shape).ravel()
               for v in self.geometry.ids]
        self.races.access(buffer, flat.ravel(), who, write, op)

    def load(self, op, names, mask, width=None):
        buffer, index = self.address(op, names, mask, width)
        if buffer.init is not None and not buffer.init[index].all():
            raise KernelError(f"reads {buffer.name} where nothing was written: {op.text}")
        self.record(buffer, index, mask, False, op)
        result = np.zeros(self.shape + ((width,) if width is not None else ()), buffer.array.dtype)
        result[mask] = buffer.array[index]
        return result

    def store(self, op, value, names, mask, width=None):
        buffer, index = self.address(op, names, mask, width)
        if value.dtype != buffer.array.dtype:
            raise TypeError(f"wrong type: {op.text}")
        if buffer.read_only:
            raise KernelError(f"stores to the read-only {buffer.name}: {op.text}")
        flat = np.ravel_multi_index(np.broadcast_arrays(*index), buffer.array.shape)
        if has_duplicates(flat):
            raise KernelError(f"lanes racing on an element: {op.text}")
        self.record(buffer, index, mask, True, op)
        written(buffer, index, value[mask])

    def op_memref_load(self, op, mask):
        self.env[op.results[0]] = self.load(op, op.operands, mask)

    def op_memref_store(self, op, mask):
        self.store(op, self.get(op.operands[0]), op.operands[1:], mask)

    def vector_access(self, op, mask, names):
        """The width of a vector.load/store, its alignment checked (the
        buffer's base aligned, rows dense)."""
        shape, elem, width = memref_type(op.type)
        m = re.search(r"alignment = (\d+)", op.body)
        if m:
            buffer, index = self.address(op, names, mask)
            flat = np.ravel_multi_index(index[buffer.per_block:], buffer.shape)
            if (flat * buffer.array.itemsize % int(m.group(1))).any():
                raise KernelError(f"misaligned: {op.text}")
        return width

    def op_vector_load(self, op, mask):
        width = self.vector_access(op, mask, op.operands)
        self.env[op.results[0]] = self.load(op, op.operands, mask, width)

    def op_vector_store(self, op, mask):
        width = self.vector_access(op, mask, op.operands[1:])
        self.store(op, self.get(op.operands[0]), op.operands[1:], mask, width)

    # Threads, warps and blocks.

    def op_gpu_thread_id(self, op, mask):
        self.env[op.results[0]] = self.geometry.tid["xyz".index(op.words[0])]

    def op_gpu_block_id(self, op, mask):
        self.env[op.results[0]] = self.geometry.bid["xyz".index(op.words[0])]

    def op_gpu_block_dim(self, op, mask):
        self.env[op.results[0]] = self.full(self.geometry.block["xyz".index(op.words[0])], np.int64)

    def op_gpu_grid_dim(self, op, mask):
        self.env[op.results[0]] = self.full(self.geometry.grid["xyz".index(op.words[0])], np.int64)

    def op_gpu_lane_id(self, op, mask):
        self.env[op.results[0]] = self.geometry.lane

    def whole_warps(self, op, mask, member=None):
        """The warps (rows) taking part; all 32 lanes of each must, and the
        member mask (if any) must name them all."""
        if self.geometry is None:
            raise KernelError(f"{op.name} on the host")
        rows = mask.any(axis=1)
        if member is not None and rows.any() and uniform(member, mask, "member mask") != -1:
            raise NotImplementedError(f"a member mask other than all lanes: {op.text}")
        if not mask[rows].all():
            raise KernelError(f"{op.name} reached by part of a warp (divergent): {op.text}")
        return rows

    def op_gpu_barrier(self, op, mask):
        """A no-op in lockstep, but all threads of a block or none must reach it."""
        if self.geometry is None:
            raise KernelError(f"gpu.barrier on the host")
        g = self.geometry
        active = np.bincount(g.block_row, weights=mask.sum(axis=1), minlength=len(g.blocks))
        bad = np.flatnonzero((active > 0) & (active != g.tpb))
        if bad.size:
            raise KernelError(f"gpu.barrier reached by {int(active[bad[0]])} of {g.tpb} threads "
                              f"of block {g.blocks[bad[0]]} (divergent): {op.text}")
        self.races.barrier(g.blocks[active > 0])

    def op_nvvm_bar_warp_sync(self, op, mask):
        rows = self.whole_warps(op, mask, self.get(op.operands[0]))
        self.races.warp_sync(self.geometry.ids[1][rows, 0])

    def op_nvvm_match_sync(self, op, mask):
        """match.any.sync.b32: per lane the mask of the warp's lanes holding
        its value."""
        if op.words != ["any"]:
            raise NotImplementedError(op.text)
        self.whole_warps(op, mask, self.get(op.operands[0]))
        value = self.get(op.operands[1])
        same = value[:, :, None] == value[:, None, :]
        bits = (same.astype(np.uint64) << np.arange(32, dtype=np.uint64)).sum(axis=2)
        self.env[op.results[0]] = bits.astype(np.uint32).view(np.int32)

    def op_gpu_shuffle(self, op, mask):
        self.whole_warps(op, mask)
        if op.words != ["xor"]:
            raise NotImplementedError(f"shuffle not xor: {op.text}")
        value, offset, width = (self.get(v) for v in op.operands)
        if uniform(width, mask, "shuffle width") != 32:
            raise NotImplementedError(op.text)
        lane = np.arange(32)[None, :]
        valid = (lane ^ offset) < 32  # else the lane gets its own value (PTX shfl.sync)
        source = np.where(valid, lane ^ offset, lane)
        self.env[op.results[0]] = np.take_along_axis(value, source, axis=1)
        self.env[op.results[1]] = valid

    # Vectors, bit casts, LLVM structs.

    def op_vector_bitcast(self, op, mask):
        """Reinterprets the bits of the trailing vector axis (little endian:
        element 0 of the narrower type is the low bits of the wider one)."""
        value = np.ascontiguousarray(self.get(op.operands[0]))
        dtype = np.dtype(DTYPE[element_type(op.type)])
        width = re.fullmatch(r"vector<(\d+)x\w+>", op.type.split(" to ")[-1].strip())
        out = value.view(dtype)
        if width is None or out.shape[-1] != int(width.group(1)):
            raise NotImplementedError(f"bitcast: {op.text}")
        self.env[op.results[0]] = out

    def vector_position(self, op, what):
        """The position of a vector.extract / vector.insert: an int, or a lane
        array (a dynamic position)."""
        m = re.search(r"\[([^\]]*)\]", op.body)
        parts = [p.strip() for p in m.group(1).split(",")] if m else []
        if len(parts) != 1:
            raise NotImplementedError(f"{what} of a position not one index: {op.text}")
        return self.get(parts[0]) if parts[0].startswith("%") else int(parts[0])

    def op_vector_extract(self, op, mask):
        """A scalar of a 1-D vector (a static or dynamic position), or a row
        of a 2-D one (a static position)."""
        vector = self.get(op.operands[0])
        m = re.fullmatch(r"(\w+|vector<(\d+)x\w+>) from vector<(\d+)x(?:(\d+)x)?\w+>", op.type)
        if not m or m.group(2) != m.group(4):  # a scalar of 1-D, a row of 2-D
            raise NotImplementedError(f"vector.extract of this type: {op.text}")
        axis = -2 if m.group(4) else -1
        at = self.vector_position(op, "vector.extract")
        if isinstance(at, int):
            if not 0 <= at < vector.shape[axis]:
                raise KernelError(f"position out of the vector: {op.text}")
            self.env[op.results[0]] = np.take(vector, at, axis=axis).copy()
        else:
            if axis != -1:
                raise NotImplementedError(f"vector.extract at a dynamic position: {op.text}")
            bad = mask & ((at < 0) | (at >= vector.shape[-1]))
            if bad.any():
                raise KernelError(f"position out of the vector: {op.text}")
            index = np.where(mask, at, 0).astype(np.int64)[..., None]
            self.env[op.results[0]] = np.take_along_axis(vector, index, axis=-1)[..., 0]

    def op_vector_insert(self, op, mask):
        """vector.insert %scalar, %vector [i] (a static position)."""
        if not re.fullmatch(r"\w+ into vector<\d+x\w+>", op.type):
            raise NotImplementedError(f"vector.insert of this type: {op.text}")
        at = self.vector_position(op, "vector.insert")
        value, vector = (self.get(v) for v in op.operands[:2])
        if not isinstance(at, int):
            raise NotImplementedError(f"vector.insert at a dynamic position: {op.text}")
        if not 0 <= at < vector.shape[-1]:
            raise KernelError(f"position out of the vector: {op.text}")
        out = np.array(vector, copy=True)
        out[..., at] = value
        self.env[op.results[0]] = out

    def op_vector_from_elements(self, op, mask):
        m = re.fullmatch(r"vector<(\d+)x(\w+)>", op.type.strip())
        if not m or int(m.group(1)) != len(op.operands):
            raise NotImplementedError(f"vector.from_elements: {op.text}")
        dtype = DTYPE[m.group(2)]
        self.env[op.results[0]] = np.stack(
            [np.broadcast_to(self.get(v), self.shape).astype(dtype) for v in op.operands], axis=-1)

    def op_vector_splat(self, op, mask):
        m = re.fullmatch(r"vector<(\d+)x(\w+)>", op.type.split(" to ")[-1].strip())
        if not m:
            raise NotImplementedError(f"{op.name}: {op.text}")
        value = self.get(op.operands[0]).astype(DTYPE[m.group(2)])
        self.env[op.results[0]] = np.repeat(value[..., None], int(m.group(1)), axis=-1)

    op_vector_broadcast = op_vector_splat

    def op_llvm_extractvalue(self, op, mask):
        """A field of an LLVM struct (structs of one element type are arrays
        with a trailing axis, as nvvm.mma.sync makes them)."""
        m = re.search(r"\[(\d+)\]", op.body)
        struct = self.get(op.operands[0])
        if not m or int(m.group(1)) >= struct.shape[-1]:
            raise NotImplementedError(f"llvm.extractvalue: {op.text}")
        check_complete(struct, mask, op)
        self.env[op.results[0]] = np.array(struct[..., int(m.group(1))])

    def op_llvm_insertvalue(self, op, mask):
        m = re.search(r"\[(\d+)\]", op.body)
        value, struct = (self.get(v) for v in op.operands[:2])
        if not m or int(m.group(1)) >= struct.shape[-1]:
            raise NotImplementedError(f"llvm.insertvalue: {op.text}")
        out = np.array(struct, copy=True)
        out[..., int(m.group(1))] = value
        self.env[op.results[0]] = out

    def op_llvm_mlir_constant(self, op, mask):
        m = re.fullmatch(r"\s*\((-?\d+) : (\w+)\)\s*", op.body)
        if not m or m.group(2) not in DTYPE:
            raise NotImplementedError(f"llvm.mlir.constant: {op.text}")
        self.env[op.results[0]] = self.full(int(m.group(1)), DTYPE[m.group(2)])

    def op_llvm_icmp(self, op, mask):
        m = re.match(r'\s*"(\w+)"', op.body)
        self.env[op.results[0]] = cmpi(m.group(1), *(self.get(v) for v in op.operands))

    def op_memref_get_global(self, op, mask):
        m = re.match(r"\s*@([\w.]+)", op.body)
        if not m or m.group(1) not in GLOBALS:
            raise NotImplementedError(f"memref.get_global: {op.text}")
        self.buffers[op.results[0]] = Buffer(GLOBALS[m.group(1)], m.group(1), read_only=True)

    def op_llvm_mlir_zero(self, op, mask):
        ty = op.text.rpartition(" : ")[2].strip()  # no operands: no " : " split
        if ty in DTYPE:  # a scalar, or a null pointer (the int64 0 here)
            self.env[op.results[0]] = self.full(0, DTYPE[ty])
            return
        fields = struct_fields(ty)
        self.env[op.results[0]] = self.full(0, DTYPE[fields[0]], (len(fields),))

    def op_arith_bitcast(self, op, mask):
        """The bits of each element as another type of their width."""
        value = np.ascontiguousarray(self.get(op.operands[0]))
        dtype = np.dtype(DTYPE[element_type(op.type)])
        if dtype.itemsize != value.dtype.itemsize:
            raise NotImplementedError(f"arith.bitcast: {op.text}")
        self.env[op.results[0]] = value.view(dtype)

    def op_vector_shuffle(self, op, mask):
        """The elements of the two vectors, concatenated, at the positions given."""
        m = re.search(r"\[([\d, ]*)\]", op.body)
        a, b = (self.get(v) for v in op.operands[:2])
        positions = [int(p) for p in m.group(1).split(",")] if m else []
        both = np.concatenate([a, b], axis=-1)
        if not positions or max(positions) >= both.shape[-1] or a.ndim != len(self.shape) + 1:
            raise NotImplementedError(f"vector.shuffle: {op.text}")
        self.env[op.results[0]] = both[..., positions].copy()

    def op_vector_reduction(self, op, mask):
        kinds = {"maxnumf": np.fmax, "maximumf": np.maximum, "add": np.add, "minnumf": np.fmin}
        m = re.match(r"\s*<(\w+)>", op.body)
        if not m or m.group(1) not in kinds or len(op.operands) != 1:
            raise NotImplementedError(f"vector.reduction: {op.text}")
        self.env[op.results[0]] = kinds[m.group(1)].reduce(self.get(op.operands[0]), axis=-1)

    def op_nvvm_convert_f32x2_to_f8x2(self, op, mask):
        """cvt.rn.satfinite.e4m3x2.f32 d, a, b: a's code in the high byte of
        d, b's in the low byte."""
        if (op.type.replace(" ", "") != "i16(f8E4M3FN)" or "#nvvm.fp_rnd_mode<rn>" not in op.body
                or "#nvvm.sat_mode<satfinite>" not in op.body):
            raise NotImplementedError(f"a conversion other than rn satfinite to E4M3: {op.text}")
        high, low = (tc.e4m3_satfinite(self.get(v)).astype(np.uint16) for v in op.operands)
        self.env[op.results[0]] = ((high << 8) | low).view(np.int16)

    # Dynamic shared memory.

    def op_memref_extract_aligned_pointer_as_index(self, op, mask):
        """The shared memory address of dynamic shared memory or a view of it."""
        buffer = self.buffers.get(op.operands[0])
        if buffer is None or buffer.address is None:
            raise NotImplementedError(f"the address of a buffer not in shared memory: {op.text}")
        self.env[op.results[0]] = self.full(buffer.address, np.int64)

    def op_gpu_dynamic_shared_memory(self, op, mask):
        """The block's dynamic shared memory, bytes (fresh, unwritten), the
        same for every such op of the kernel."""
        if self.geometry is None:
            raise KernelError(f"gpu.dynamic_shared_memory on the host: {op.text}")
        if not re.fullmatch(r".* : memref<\?xi8, #gpu\.address_space<workgroup>>", op.text):
            raise NotImplementedError(op.text)
        if getattr(self, "dynamic_memory", None) is None:
            size = getattr(self, "dynamic_shared", 0)
            self.dynamic_memory = Buffer(poison((len(self.geometry.blocks), size), np.uint8),
                                         "dynamic shared memory", initialised=False,
                                         per_block=True)
            self.dynamic_memory.address = SHARED_BASE
        self.buffers[op.results[0]] = self.dynamic_memory

    def op_memref_view(self, op, mask):
        """A typed view of the dynamic shared memory at a byte offset: a
        Buffer on the same bytes. Each view keeps its own record of what was
        written and its own race record (a kernel whose views overlap is not
        checked across them)."""
        source, offset = op.operands[:2]
        base = self.buffers[source]
        if not base.per_block:
            return self.global_view(op, mask, base)
        m = re.fullmatch(r"\s*%[\w-]+\[%[\w-]+\]\[\]\s*", op.body)
        shape, elem, _ = memref_type(op.type.split(" to ")[-1])
        if not m or not base.per_block or None in shape or base.array.dtype != np.uint8:
            raise NotImplementedError(f"memref.view: {op.text}")
        start = uniform(self.get(offset), mask, "view offset")
        dtype = np.dtype(DTYPE[elem])
        size = math.prod(shape) * dtype.itemsize
        if start < 0 or start + size > base.shape[0] or start % dtype.itemsize:
            raise KernelError(f"view of bytes [{start}, {start + size}) of "
                              f"{base.shape[0]}: {op.text}")
        views = self.__dict__.setdefault("views", {})
        if op.results[0] not in views:
            array = base.array[:, start:start + size].view(dtype).reshape((-1,) + shape)
            views[op.results[0]] = Buffer(array, f"{base.name} {op.results[0]}",
                                          initialised=False, per_block=True)
            views[op.results[0]].address = base.address + start
            views[op.results[0]].byte_offset = start
        self.buffers[op.results[0]] = views[op.results[0]]

    def global_view(self, op, mask, base):
        """A typed view of a global byte buffer (the workspace) at a byte
        offset, its dynamic sizes given: a Buffer on the same bytes, never
        written yet; bytes it writes are its own until another view writes
        them (Buffer.check_bytes)."""
        m = re.fullmatch(r"\s*%[\w-]+\[(%[\w-]+)\]\[([^\]]*)\]\s*", op.body)
        shape, elem, _ = memref_type(op.type.split(" to ")[-1])
        if not m or base.array.dtype != np.uint8 or base.array.ndim != 1:
            raise NotImplementedError(f"memref.view: {op.text}")
        sizes = iter(uniform(self.get(v), mask, "view size") for v in re.findall(r"%[\w-]+",
                                                                                  m.group(2)))
        shape = tuple(next(sizes) if d is None else d for d in shape)
        start = uniform(self.get(m.group(1)), mask, "view offset")
        dtype = np.dtype(DTYPE[elem])
        size = math.prod(shape) * dtype.itemsize
        if start < 0 or start + size > base.shape[0] or start % dtype.itemsize:
            raise KernelError(f"view of bytes [{start}, {start + size}) of "
                              f"{base.shape[0]}: {op.text}")
        view = Buffer(base.array[start:start + size].view(dtype).reshape(shape),
                      f"{base.name} {op.results[0]}", initialised=False)
        view.bytes, view.root = (base, len(base.views)), base.root
        base.views.append(view.name)
        self.buffers[op.results[0]] = view

    def op_memref_cast(self, op, mask):
        self.buffers[op.results[0]] = self.buffers[op.operands[0]]

    def reshaped(self, op):
        """expand_shape / collapse_shape: the same elements in the result's shape."""
        buffer = self.buffers[op.operands[0]]
        shape, _, _ = memref_type(op.type.split(" into ")[-1])
        known = math.prod(d for d in shape if d is not None)
        shape = tuple(buffer.array.size // known if d is None else d for d in shape)
        if shape.count(None) > 1 or math.prod(shape) != buffer.array.size:
            raise NotImplementedError(f"{op.name}: {op.text}")
        self.buffers[op.results[0]] = buffer.alias(lambda a: a.reshape(shape),
                                                   f"{buffer.name} {op.results[0]}")

    def op_memref_subview(self, op, mask):
        """A box of the source's elements (offsets, sizes, strides; same rank)."""
        m = re.fullmatch(r"\s*(%[\w-]+)\[([^\]]*)\] \[([^\]]*)\] \[([^\]]*)\]\s*", op.body)
        if not m:
            raise NotImplementedError(f"memref.subview: {op.text}")
        buffer = self.buffers[m.group(1)]

        def numbers(text):
            return [int(uniform(self.get(v), mask, op.text)) if v.startswith("%") else int(v)
                    for v in (w.strip() for w in text.split(","))]
        offsets, sizes, strides = (numbers(m.group(i)) for i in (2, 3, 4))
        shape, _, _ = memref_type(op.type.split(" to ")[-1])
        if not len(offsets) == len(shape) == len(buffer.shape):
            raise NotImplementedError(f"a rank-reducing subview: {op.text}")
        if any(o < 0 or o + (n - 1) * st >= d for o, n, st, d in zip(offsets, sizes, strides,
                                                                     buffer.shape) if n):
            raise KernelError(f"subview out of {list(buffer.shape)}: {op.text}")
        box = tuple(slice(o, o + n * st, st) for o, n, st in zip(offsets, sizes, strides))
        self.buffers[op.results[0]] = buffer.alias(lambda a: a[box],
                                                   f"{buffer.name} {op.results[0]}")

    op_memref_expand_shape = op_memref_collapse_shape = lambda self, op, mask: self.reshaped(op)

    def op_memref_dim(self, op, mask):
        dim = uniform(self.get(op.operands[1]), mask, op.text)
        self.env[op.results[0]] = self.full(self.buffers[op.operands[0]].shape[dim], np.int64)

    def op_cf_assert(self, op, mask):
        if not self.get(op.operands[0])[mask].all():
            raise KernelError(f"assertion failed: {op.text}")

    def op_affine_apply(self, op, mask):
        """affine.apply #map(dims)[symbols] of a map the module defines."""
        m = re.fullmatch(r"\s*(#\w+)\(([^)]*)\)(?:\[([^\]]*)\])?\s*", op.body)
        if not m or m.group(1) not in AFFINE_MAPS:
            raise NotImplementedError(f"affine.apply: {op.text}")
        values = [self.get(v) for v in re.findall(r"%[\w-]+", (m.group(2) or "") + " "
                                                   + (m.group(3) or ""))]
        self.env[op.results[0]] = AFFINE_MAPS[m.group(1)](values).astype(np.int64)

    # ldmatrix and cp.async.

    def op_nvgpu_ldmatrix(self, op, mask):
        """ldmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans].shared.b16: lanes
        8 i .. 8 i + 7 give the rows of matrix i (8 contiguous b16 each, 16
        bytes aligned; other lanes' indices are not used); every lane gets per
        matrix the elements (laneid >> 2, 2 (laneid % 4) + j), j = 0, 1, or
        with .trans (2 (laneid % 4) + j, laneid >> 2). All 32 lanes run it.
        Each element counts as read by the lane that receives it (so the
        lanes that wrote the rows must be ordered before all of them)."""
        m = re.search(r"numTiles = (\d+) : i32, transpose = (true|false)", op.body)
        tiles = int(m.group(1)) if m else 0
        if (tiles not in (1, 2, 4) or not re.search(rf"-> vector<{tiles}x2x\w+>$", op.type)
                or "#gpu.address_space<workgroup>" not in op.type):
            raise NotImplementedError(f"ldmatrix: {op.text}")
        transpose = m.group(2) == "true"
        rows = self.whole_warps(op, mask)
        giving = mask & (self.geometry.lane < 8 * tiles)
        buffer, index = self.address(op, op.operands, giving)  # bounds checked
        if buffer.array.itemsize != 2:
            raise NotImplementedError(f"ldmatrix of elements not 16 bits: {op.text}")
        flat = np.ravel_multi_index(index[buffer.per_block:], buffer.shape)
        if (flat * 2 % 16).any():
            raise KernelError(f"misaligned ldmatrix row: {op.text}")
        if buffer.shape[-1] < 8 or (index[-1] > buffer.shape[-1] - 8).any():
            raise KernelError(f"ldmatrix row past the end of its memref: {op.text}")
        every = np.broadcast_to(rows[:, None], self.shape)
        starts = [self.get(v) for v in op.operands[1:]]  # per lane, its row's start
        if buffer.per_block:
            starts = [np.broadcast_to(self.geometry.block_row[:, None], self.shape)] + starts
        lane = np.arange(32)
        out = np.zeros(self.shape + (tiles, 2), buffer.array.dtype)
        for i in range(tiles):
            for j in range(2):
                giver = 8 * i + (2 * (lane % 4) + j if transpose else lane >> 2)
                column = lane >> 2 if transpose else 2 * (lane % 4) + j
                where = [np.take(v, giver, axis=1) for v in starts]
                where[-1] = where[-1] + column
                where = tuple(v[every].astype(np.int64) for v in where)
                if buffer.init is not None and not buffer.init[where].all():
                    raise KernelError(f"reads {buffer.name} where nothing was written: {op.text}")
                self.record(buffer, where, every, False, op)
                out[..., i, j][every] = buffer.array[where]
        self.env[op.results[0]] = out

    def op_nvgpu_device_async_copy(self, op, mask):
        """cp.async of n elements a lane from global to shared memory. The
        source is read now; the destination is written only when a
        device_async_wait lets the copy's group complete (a read before then
        sees what was there). The race detector sees the write both now (it
        may land any time from now) and when it lands."""
        m = re.fullmatch(r"\s*(%[\w-]+)\[([^\]]*)\], (%[\w-]+)\[([^\]]*)\], (\d+)(.*)", op.body)
        if not m or m.group(6).strip() not in ("", "{bypassL1}"):
            raise NotImplementedError(f"device_async_copy: {op.text}")
        src_type, dst_type = op.type.split(" to ")
        source = [m.group(1)] + re.findall(r"%[\w-]+", m.group(2))
        target = [m.group(3)] + re.findall(r"%[\w-]+", m.group(4))
        count = int(m.group(5))
        shape, elem, _ = memref_type(src_type)
        size = count * np.dtype(DTYPE[elem]).itemsize
        if size not in (4, 8, 16):
            raise KernelError(f"cp.async of {size} bytes: {op.text}")
        def typed(ty):  # the copy seen as an access of one side's type
            return types.SimpleNamespace(type=ty, text=op.text, body=op.body)
        values = self.load(typed(src_type), source, mask, count)
        buffer, index = self.address(typed(dst_type), target, mask, count)
        for names, ty in ((source, src_type), (target, dst_type)):
            b, ix = self.address(typed(ty), names, mask)
            flat = np.ravel_multi_index(ix[b.per_block:], b.shape)
            if (flat * b.array.itemsize % size).any():
                raise KernelError(f"misaligned cp.async: {op.text}")
        flat = np.ravel_multi_index(np.broadcast_arrays(*index), buffer.array.shape)
        if has_duplicates(flat):
            raise KernelError(f"lanes racing on an element: {op.text}")
        if buffer.read_only or not buffer.per_block:
            raise KernelError(f"cp.async to global memory: {op.text}")
        self.record(buffer, index, mask, True, op)
        copies = self.__dict__.setdefault("async_copies", [])
        lanes = int(mask.sum())
        copies.append(dict(buffer=buffer, index=index, values=values[mask], lanes=mask.copy(),
                           group=np.full(lanes, -1), landed=np.zeros(lanes, bool), op=op))
        self.env[op.results[0]] = self.full(len(copies), np.int64)

    def async_groups(self):
        if getattr(self, "committed", None) is None:
            self.committed = np.zeros(self.shape, np.int64)
        return self.committed

    def op_nvgpu_device_async_create_group(self, op, mask):
        """cp.async.commit_group: each lane's copies not yet in a group make
        its next group."""
        committed = self.async_groups()
        for copy in getattr(self, "async_copies", []):
            mine = mask[copy["lanes"]] & (copy["group"] < 0)
            copy["group"][mine] = committed[copy["lanes"]][mine]
        self.env[op.results[0]] = committed.copy()
        committed[mask] += 1

    def op_nvgpu_device_async_wait(self, op, mask):
        """cp.async.wait_group N: each lane's copies but those of its N
        latest groups land (a lane's copies in no group land too if N = 0,
        as cp.async.wait_all)."""
        m = re.search(r"numGroups = (\d+)", op.body)
        pending = int(m.group(1)) if m else 0
        committed = self.async_groups()
        left = []
        for copy in getattr(self, "async_copies", []):
            lanes = copy["lanes"]
            here = mask[lanes] & ~copy["landed"]
            group = copy["group"]
            done = here & (((group >= 0) & (group < committed[lanes] - pending))
                           | ((group < 0) & (pending == 0)))
            if done.any():
                who = np.zeros(self.shape, bool)
                who[lanes] = done
                index = tuple(ix[done] for ix in copy["index"])
                buffer, values = copy["buffer"], copy["values"][done]
                self.record(buffer, index, who, True, copy["op"])
                written(buffer, index, values)
                copy["landed"] |= done
            if not copy["landed"].all():
                left.append(copy)
        self.async_copies = left

    # Tensor cores.

    def op_nvvm_mma_sync(self, op, mask):
        """mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (the only form
        known): per warp D = A (16x16) * B (16x8) + C in the fragment layout of
        the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point
        type"); see tensor_cores.MMA_M16N8K16. The products (exact in float64: bf16 x
        bf16) and C are summed in float64 and rounded once to f32: the ISA
        leaves the tensor cores' order and internal precision of the
        accumulation unspecified, any of them within f32 rounding of the sum.
        All 32 lanes of each warp taking part must run it (.aligned)."""
        attributes = dict(re.findall(r"(\w+) = (#nvvm\.[\w_]+<[^>]*>)", op.body))
        want = {"layoutA": "#nvvm.mma_layout<row>", "layoutB": "#nvvm.mma_layout<col>",
                "multiplicandAPtxType": "#nvvm.mma_type<bf16>",
                "multiplicandBPtxType": "#nvvm.mma_type<bf16>",
                "shape": "#nvvm.shape<m = 16, n = 8, k = 16>"}
        groups = re.fullmatch(r"\s*A\[([^\]]*)\]\s*B\[([^\]]*)\]\s*C\[([^\]]*)\].*", op.body)
        if (any(attributes.get(k) != v for k, v in want.items())
                or op.type.replace(" ", "") != "(i32,i32,f32)->!llvm.struct<(f32,f32,f32,f32)>"
                or not groups or [len(re.findall(r"%[\w#-]+", g)) for g in groups.groups()]
                != [4, 2, 4] or "b1Op" in op.body or "intOverflowBehavior" in op.body):
            raise NotImplementedError(f"an mma.sync other than m16n8k16 row.col "
                                      f"f32.bf16.bf16.f32: {op.text}")
        rows = self.whole_warps(op, mask)
        a, b, c = (np.stack([self.get(v) for v in names], axis=-1)
                   for names in (op.operands[:4], op.operands[4:6], op.operands[6:10]))
        out = np.zeros(self.shape + (4,), np.float32)
        if rows.any():
            out[rows] = tc.mma_m16n8k16(a[rows], b[rows], c[rows])
        self.env[op.results[0]] = out


    # wgmma: a warpgroup's asynchronous products from shared memory.

    def warpgroups(self, op, mask):
        """The warpgroups taking part, as [groups, 4] warp rows: all 128
        threads of each must run the op (.sync.aligned)."""
        g = self.geometry
        if g is None or g.tpb % 128:
            raise KernelError(f"{op.name} in blocks not of whole warpgroups: {op.text}")
        rows = self.whole_warps(op, mask)
        groups = rows.reshape(-1, 4)
        if (groups.any(axis=1) & ~groups.all(axis=1)).any():
            raise KernelError(f"{op.name} reached by part of a warpgroup (divergent): {op.text}")
        return np.flatnonzero(rows).reshape(-1, 4)

    def wgmma_state(self):
        if getattr(self, "wgmma_records", None) is None:
            rows = self.shape[0]
            self.wgmma_records, self.wgmma_committed = [], np.zeros(rows, np.int64)
            self.wgmma_fenced = np.zeros(rows, bool)
        return self.wgmma_records

    def op_nvvm_wgmma_fence_aligned(self, op, mask):
        self.wgmma_state()
        self.wgmma_fenced[self.warpgroups(op, mask).ravel()] = True

    def op_nvvm_fence_proxy(self, op, mask):
        """fence.proxy.async.shared::cta: the running threads' shared memory
        writes so far become visible to the async proxy (wgmma)."""
        if ("#nvvm.proxy_kind<async.shared>" not in op.body
                or "#nvvm.shared_space<cta>" not in op.body):
            raise NotImplementedError(f"fence.proxy: {op.text}")
        fencing = self.geometry.ids[0][mask]
        for buffer in {id(b): b for b in self.buffers.values()}.values():
            if buffer.unfenced is None or not buffer.unfenced.any():
                continue
            flat = np.flatnonzero(buffer.unfenced)
            writer = self.races.shadow(buffer)[flat, Races.T]
            buffer.unfenced.flat[flat[np.isin(writer, fencing)]] = False

    def shared_operand(self, op, addresses, block_row, warps):
        """The bytes at shared memory `addresses` of a block (a chunk's block
        row) as wgmma reads them: within one view of the dynamic shared
        memory, written, fenced for the async proxy, recorded as read by the
        warpgroup (`warps`). Returns (bytes, the read's record)."""
        memory = getattr(self, "dynamic_memory", None)
        offset = addresses - SHARED_BASE
        if memory is None or offset.min() < 0 or offset.max() >= memory.shape[0]:
            raise KernelError(f"wgmma operand outside the dynamic shared memory: {op.text}")
        view = next((v for v in getattr(self, "views", {}).values()
                     if v.byte_offset <= offset.min()
                     and offset.max() < v.byte_offset + v.array[0].nbytes), None)
        if view is None:
            raise KernelError(f"wgmma operand not within one view: {op.text}")
        element = np.unique((offset - view.byte_offset) // view.array.itemsize)
        index = (np.full(element.shape, block_row),) + np.unravel_index(element, view.shape)
        if not view.init[index].all():
            raise KernelError(f"wgmma reads {view.name} where nothing was written: {op.text}")
        if view.unfenced is not None and view.unfenced[index].any():
            raise KernelError(f"wgmma reads {view.name} written with no fence.proxy.async "
                              f"since: {op.text}")
        flat = np.ravel_multi_index(index, view.array.shape)
        read = (view, np.repeat(flat, 4), [np.tile(ids[warps, 0], flat.size)
                                            for ids in self.geometry.ids])
        self.races.access(*read, False, op)
        return memory.array[block_row, offset], read

    def op_nvvm_wgmma_mma_async(self, op, mask):
        """wgmma.mma_async.sync.aligned.m64nNkK.f32 with both operands in shared
        memory, K-major with 128-byte swizzle (bf16 k16 or e4m3 k32): per
        warpgroup D = A B^T (+ C with scale-d 1), see tensor_cores.wgmma. The
        operands are read at issue and count as read again when a wait
        retires the product (a write between races); the result is in flight
        (InFlight) until then. The warps must have run wgmma.fence since
        their last wait."""
        m = re.fullmatch(r"\s*(%[\w#-]+), (%[\w#-]+), (%[\w#-]+), <m = 64, n = (\d+), k = (\d+)>, "
                         r"D\[<f32>, <(one|zero)>\], A\[<(bf16|e4m3)>, <one>, <row>\], "
                         r"B\[<(bf16|e4m3)>, <one>, <col>\]\s*", op.body)
        if not m or m.group(7) != m.group(8) or int(m.group(5)) != {"bf16": 16,
                                                                 "e4m3": 32}[m.group(7)]:
            raise NotImplementedError(f"a wgmma other than bf16 k16 or e4m3 k32 from shared "
                                      f"memory into f32: {op.text}")
        n, accumulate, kind = int(m.group(4)), m.group(6) == "one", m.group(7)
        if n % 8 or not 8 <= n <= 256 or len(struct_fields(op.type.split("->")[-1])) != n // 2:
            raise NotImplementedError(f"wgmma n = {n}: {op.text}")
        records = self.wgmma_state()
        groups = self.warpgroups(op, mask)
        if not self.wgmma_fenced[groups.ravel()].all():
            raise KernelError(f"wgmma with no wgmma.fence since the warps' last wait: {op.text}")
        descriptors = [self.get(v) for v in m.group(1, 2)]
        accumulators = self.get(m.group(3))
        out = np.zeros(self.shape + (n // 2,), np.float32)
        record = dict(rows=np.zeros(self.shape[0], bool), group=np.full(self.shape[0], -1),
                      retired=np.zeros(self.shape[0], bool), reads=[], op=op)
        for warps in groups:
            block_row = self.geometry.block_row[warps[0]]
            operands = []
            for desc, rows in zip(descriptors, (64, n)):
                value = desc[warps]
                if (value != value.flat[0]).any():
                    raise KernelError(f"wgmma descriptor not uniform over the warpgroup: {op.text}")
                start, _, stride, base, swizzle = tc.decode_descriptor(value.flat[0])
                if swizzle != tc.SWIZZLE_128B or base != 0 or stride == 0:
                    raise NotImplementedError(f"a descriptor other than 128-byte swizzle with "
                                              f"base offset 0: {op.text}")
                if start % 16:
                    raise KernelError(f"wgmma operand misaligned: {op.text}")
                addresses = tc.kmajor_swizzled_addresses(start, stride, rows, 32)
                raw, read = self.shared_operand(op, addresses, block_row, warps)
                record["reads"].append(read)
                raw = np.ascontiguousarray(raw)
                values = raw.view(np.uint16).view(tc.BF16) if kind == "bf16" else raw.view(tc.E4M3)
                operands.append(values.astype(np.float64))
            c = accumulators[warps].reshape(128, n // 2) if accumulate else None
            out[warps] = tc.wgmma(*operands, c).reshape(4, 32, n // 2)
            record["rows"][warps] = True
        records.append(record)
        self.env[op.results[0]] = in_flight(out, record)

    def op_nvvm_wgmma_commit_group_sync_aligned(self, op, mask):
        """The warps' products not yet in a group make their next group."""
        records, warps = self.wgmma_state(), self.warpgroups(op, mask).ravel()
        for record in records:
            new = np.zeros_like(record["rows"])
            new[warps] = record["rows"][warps] & (record["group"][warps] < 0)
            record["group"][new] = self.wgmma_committed[new]
        self.wgmma_committed[warps] += 1

    def op_nvvm_wgmma_wait_group_sync_aligned(self, op, mask):
        """wgmma.wait_group N: the warps' products but those of their N latest
        groups complete; their shared memory reads are recorded again, now."""
        pending = int(op.body.strip())
        records, warps = self.wgmma_state(), self.warpgroups(op, mask).ravel()
        here = np.zeros(self.shape[0], bool)
        here[warps] = True
        for record in records:
            done = (here & record["rows"] & ~record["retired"] & (record["group"] >= 0)
                    & (record["group"] < self.wgmma_committed - pending))
            if done.any():
                record["retired"] |= done
                for view, flat, who in record["reads"]:
                    if done[np.isin(self.geometry.ids[1][:, 0], who[1])].any():
                        self.races.access(view, flat, who, False, record["op"])
        self.wgmma_records = [r for r in records if not (r["retired"] == r["rows"]).all()]
        self.wgmma_fenced[warps] = False

    def wgmma_in_flight(self):
        """The first product some warp never waited for, or None."""
        return next((r["op"] for r in getattr(self, "wgmma_records", None) or []
                     if (r["rows"] & ~r["retired"]).any()), None)


class InFlight(np.ndarray):
    """Accumulators of a wgmma not yet known to be complete (`record`)."""

    def __array_finalize__(self, obj):
        self.record = getattr(obj, "record", None)


def in_flight(array, record):
    out = array.view(InFlight)
    out.record = record
    return out


def check_complete(value, mask, op):
    """Refuses a read of accumulators whose wgmma some reading warp has not
    waited for."""
    r = getattr(value, "record", None)
    if r is not None:
        if (mask.any(axis=1) & r["rows"] & ~r["retired"]).any():
            raise KernelError(f"reads accumulators of a wgmma not waited for: {op.text}")


# --- Launches and the host ------------------------------------------------------

def launch(op, buffers, parent, chunk_threads=None):
    """Runs the gpu.launch `op` on `buffers` (name -> Buffer), its sizes and
    other values from `parent` (a host Threads). A grid of no blocks is no
    launch (the runtime skips it). Returns (grid, block) sizes."""
    form = LaunchForm(op)
    size = [int(uniform(parent.get(v), parent.everywhere, v)) for _, v in form.grid + form.block]
    grid, block = size[:3], size[3:]
    shared = 0
    for _, ty in form.workgroup:
        shape, elem, _ = memref_type(ty)
        shared += math.prod(shape) * np.dtype(DTYPE[elem]).itemsize
    if (any(b < 1 or b > m for b, m in zip(block, MAX_BLOCK))
            or math.prod(block) > MAX_BLOCK_THREADS or shared > MAX_STATIC_SHARED
            or any(g < 0 or g > m for g, m in zip(grid, MAX_GRID))):
        raise KernelError(f"invalid launch: grid {grid}, block {block}, {shared} B shared")
    dynamic = 0 if form.dynamic_shared is None else int(
        uniform(parent.get(form.dynamic_shared), parent.everywhere, form.dynamic_shared))
    if dynamic < 0 or shared + dynamic > MAX_SHARED:
        raise KernelError(f"invalid launch: {dynamic} B dynamic shared memory, {shared} B static")
    if 0 in grid:
        return grid, block
    total, warps = math.prod(grid), -(-math.prod(block) // 32)
    races = Races(math.prod(block), warps, total)
    per_chunk = max(1, (chunk_threads or CHUNK_THREADS) // (warps * 32))
    for first in range(0, total, per_chunk):
        g = Geometry(np.arange(first, min(total, first + per_chunk)), grid, block)
        memory = dict(buffers)
        for name, ty in form.workgroup:  # fresh, unwritten, a copy a block
            shape, elem, _ = memref_type(ty)
            memory[name] = Buffer(poison((len(g.blocks),) + shape, DTYPE[elem]),
                                  f"workgroup {name}", initialised=False, per_block=True)
        t = Threads(memory, g.shape, parent=parent, geometry=g, races=races)
        t.dynamic_shared = dynamic
        for names, values in ((form.block_ids, g.bid), (form.thread_ids, g.tid)):
            t.env.update(zip(names, values))
        t.env.update((inner, t.full(s, np.int64))
                     for (inner, _), s in zip(form.grid + form.block, size))
        try:
            with np.errstate(all="ignore"):
                t.run(op.regions[0], g.exists)
            if (left := t.wgmma_in_flight()) is not None:
                raise KernelError(f"the kernel ends with a wgmma not waited for: {left.text}")
        except KernelError as error:
            raise KernelError(f"launch of {grid} blocks of {block}: {error}") from None
        for name, _ in form.workgroup:
            races.forget(memory[name])
    return grid, block


# The runtime's side stream (moe-gpu-side-stream); a pointer as the host sees it.
SIDE_STREAM_CALLS = ("moertGpuSideStream", "moertGpuForkSide", "moertGpuJoinSide")
SIDE_STREAM = 0x5D


class Host(Threads):
    """The function's body outside the kernels: allocations, host control
    flow, launches in sequence. `args`: argument name -> array (a memref
    argument is that array itself; a 0-d array a scalar)."""

    def __init__(self, args, externals=None):
        self.externals = externals or {}
        super().__init__({name: Buffer(a, name) for name, a in args.items() if np.ndim(a)},
                         dims={name: a.shape for name, a in args.items()})
        for buffer in self.buffers.values():
            buffer.root = buffer
        self.args, self.tensors, self.launches, self.results = args, {}, [], None
        self.side_launches = 0
        self.env.update((name, self.full(a, np.asarray(a).dtype)) for name, a in args.items()
                        if np.ndim(a) == 0)  # a scalar argument (an index)

    def op_memref_alloc(self, op, mask):
        shape, elem, _ = memref_type(op.type)
        sizes = iter(int(self.get(v)[0, 0]) for v in op.operands)
        shape = tuple(next(sizes) if d is None else d for d in shape)
        if min(shape, default=0) < 0:
            raise KernelError(f"negative size {shape}: {op.text}")
        self.buffers[op.results[0]] = Buffer(poison(shape, DTYPE[elem]), op.results[0],
                                             initialised=False)

    def op_memref_dealloc(self, op, mask):
        pass

    def op_memref_extract_strided_metadata(self, op, mask):
        """An argument's descriptor as a C caller passes it: a numpy array is
        its own base (offset 0), with its sizes and element strides."""
        buffer = self.buffers[op.operands[0]]
        array = buffer.array
        if (len(op.results) != 2 + 2 * array.ndim
                or any(s % array.itemsize for s in array.strides)):
            raise NotImplementedError(f"memref.extract_strided_metadata: {op.text}")
        self.buffers[op.results[0]] = buffer
        self.env[op.results[1]] = self.full(0, np.int64)
        for d, (size, stride) in enumerate(zip(array.shape, array.strides)):
            self.env[op.results[2 + d]] = self.full(size, np.int64)
            self.env[op.results[2 + array.ndim + d]] = self.full(stride // array.itemsize, np.int64)

    def op_memref_reinterpret_cast(self, op, mask):
        """The identity view moe-check-entry-memrefs makes of an argument it
        checked (a dense array at offset 0): the same buffer."""
        buffer = self.buffers[op.operands[0]]
        shape, _, _ = memref_type(op.type.split(" to ")[-1])
        if (len(shape) != buffer.array.ndim or not buffer.array.flags.c_contiguous
                or any(d is not None and d != s for d, s in zip(shape, buffer.shape))):
            raise NotImplementedError(f"memref.reinterpret_cast of a {buffer.shape} "
                                      f"array: {op.text}")
        self.buffers[op.results[0]] = buffer

    def op_bufferization_to_buffer(self, op, mask):
        source = op.operands[0]
        if source in self.args:
            array = np.array(self.args[source], copy=True)
            _, elem, _ = memref_type(op.type.split(" to ")[-1])
            if array.dtype != DTYPE[elem]:
                raise TypeError(f"argument {source} is {array.dtype}: {op.text}")
            buffer = Buffer(array, source, read_only="read_only" in op.body)
            buffer.root = buffer
            self.buffers[op.results[0]] = buffer
        else:
            self.buffers[op.results[0]] = self.tensors[source]

    def op_bufferization_to_tensor(self, op, mask):
        self.tensors[op.results[0]] = self.buffers[op.operands[0]]

    def op_tensor_cast(self, op, mask):
        self.tensors[op.results[0]] = self.tensors[op.operands[0]]

    def op_tensor_dim(self, op, mask):  # of a tensor the function made: its buffer's extent
        if op.operands[0] not in self.tensors:
            return super().op_tensor_dim(op, mask)
        dim = uniform(self.get(op.operands[1]), self.everywhere, op.text)
        self.env[op.results[0]] = self.full(self.tensors[op.operands[0]].shape[dim], np.int64)

    def op_func_call(self, op, mask):
        """A call of an external function (the runtime's): `externals[name](op,
        values)` with a Buffer per memref operand and a scalar per other one;
        returns the results' values. The side stream's calls act on STREAMS."""
        callee = re.match(r"\s*@([\w.]+)\(", op.body)
        if callee and callee.group(1) in SIDE_STREAM_CALLS:
            self.side_stream_call(op, callee.group(1))
            return
        if not callee or callee.group(1) not in self.externals:
            raise NotImplementedError(f"a call of an unknown function: {op.text}")
        values = [self.buffers[v] if v in self.buffers and v not in self.env
                  else int(self.get(v)[0, 0]) for v in op.operands]
        # On the entry's stream: what it reads, and what it writes, must be
        # ordered with the side stream. The calls do not say what they
        # write: the bytes of their buffers they changed.
        ordered = [(value, value.bytes_in(value.root, np.indices(value.shape)))
                   for value in values if STREAMS.side and isinstance(value, Buffer)
                   and value.root is not None and value.array.size]
        STREAMS.begin(0)
        for value, byte in ordered:
            STREAMS.access(value.root, byte, False, value.name, op)
        before = [root_bytes(value.root)[byte] for value, byte in ordered]
        results = self.externals[callee.group(1)](op, values) or []
        for (value, byte), old in zip(ordered, before):
            changed = byte[root_bytes(value.root)[byte] != old]
            if changed.size:
                STREAMS.access(value.root, changed, True, value.name, op)
        STREAMS.end()
        for name, value in zip(op.results, results):
            self.env[name] = self.full(value, np.int64)

    def side_stream_call(self, op, name):
        if name == "moertGpuSideStream":
            STREAMS.side = True
            self.env[op.results[0]] = self.full(SIDE_STREAM, np.int64)
        elif not STREAMS.side:
            raise KernelError(f"{name} before moertGpuSideStream: {op.text}")
        else:
            (STREAMS.fork if name == "moertGpuForkSide" else STREAMS.join)()

    def op_gpu_launch(self, op, mask):
        side = "function(@moe_side_stream)" in op.text
        if side and not STREAMS.side:
            raise KernelError(f"a side-stream kernel without a side stream: {op.text}")
        STREAMS.begin(1 if side else 0)
        self.side_launches += side
        try:
            self.launches.append(launch(op, self.buffers, self))
        except KernelError as error:
            raise KernelError(f"kernel {len(self.launches)}, {error}") from None
        STREAMS.end()

    def op_func_return(self, op, mask):
        if STREAMS.side and STREAMS.clock[0][1] < STREAMS.clock[1][1]:
            raise KernelError("the entry returns with side-stream kernels not joined "
                              f"(moertGpuJoinSide): {op.text}")
        self.results = [self.tensors[v] if v in self.tensors else self.get(v) for v in op.operands]


def run_function(text, name, *args, externals=None):
    """Interprets `func.func @name` of the printed module `text` on these
    arguments (numpy arrays, in order; 0-d arrays for scalars). `externals`:
    the functions it calls (Host.op_func_call). Returns the Host: `results`
    (a Buffer per returned tensor), `launches` ((grid, block) each)."""
    arg_names, body = parse_function(text, name)
    AFFINE_MAPS.clear()
    AFFINE_MAPS.update(parse_affine_maps(text))
    GLOBALS.clear()
    GLOBALS.update(parse_globals(text))
    global STREAMS
    STREAMS = Streams()
    host = Host(dict(zip(arg_names, args)), externals)
    with np.errstate(all="ignore"):
        host.run(body, host.everywhere)
    return host
