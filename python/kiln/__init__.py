"""kiln: a thin ctypes binding over libkilnrt, the kiln runtime, for PyTorch users.

    import kiln
    pack = kiln.Pack("build/specs.kpack")
    plan = pack.plan("bias_gelu", "H=4096")
    plan(x=x, b=b, y=y)              # torch CUDA tensors; dynamic dims come from shapes
    plan(x, b, y, T=x.shape[0])      # positional: input/output tensors in plan order
    plan.workspace_size(T=4096)      # bytes of scratch memory (0 for most plans)

Plans that need a workspace (plan.workspace is its size rule) get one allocated with torch
on the launch's device and stream, kept on the plan and reused (grown when too small);
plan.free_workspaces() drops them.

The library is found through $KILN_RT_LIB, else the one installed with the package
(`pip install ./python`), else build/libkilnrt.so of the source tree this package sits in,
else the system library path; the compiler (kiln.build) likewise through $KILN. torch is imported only when a
launch needs it. Every failure raises KilnError (status name + the runtime's detail).
"""
import ctypes
import ctypes.util
import os
import threading
from collections import namedtuple

__all__ = ["Pack", "Plan", "KilnError", "TensorInfo", "KernelInfo", "load_library", "torch_dtype"]

MAX_DIMS = 8

STATUS_NAMES = {
    0: "KILN_OK", 1: "KILN_ERR_INVALID_ARG", 2: "KILN_ERR_NOMEM", 3: "KILN_ERR_IO",
    4: "KILN_ERR_PACK", 5: "KILN_ERR_NO_DRIVER", 6: "KILN_ERR_NO_CUBIN", 7: "KILN_ERR_CUDA",
    8: "KILN_ERR_NOT_FOUND", 9: "KILN_ERR_UNBOUND", 10: "KILN_ERR_SHAPE",
    11: "KILN_ERR_DTYPE", 12: "KILN_ERR_STRIDE", 13: "KILN_ERR_ALIGN",
}
globals().update({name: value for value, name in STATUS_NAMES.items()})

DTYPES = ["invalid", "fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "fp8_e8m0",
          "int32", "int64", "bool"]
ROLES = ["input", "output", "virtual", "constant", "scalar", "scratch"]
ROLE_INPUT, ROLE_OUTPUT, ROLE_VIRTUAL, ROLE_CONSTANT, ROLE_SCALAR = range(5)


class KilnError(RuntimeError):
    """A libkilnrt call failed: .status (int), .name ("KILN_ERR_SHAPE"), .detail."""

    def __init__(self, status, detail=""):
        self.status = status
        self.name = STATUS_NAMES.get(status, "KILN_ERR_%d" % status)
        self.detail = detail
        text = _lib().kiln_errstr(status).decode() if _LIB else self.name
        super().__init__("%s: %s%s" % (self.name, text, ": " + detail if detail else ""))


class _PackInfo(ctypes.Structure):
    _fields_ = [("format_version", ctypes.c_uint32), ("checksum", ctypes.c_uint32),
                ("size", ctypes.c_uint64), ("nplans", ctypes.c_int), ("nimages", ctypes.c_int)]


class _PlanInfo(ctypes.Structure):
    _fields_ = [("graph", ctypes.c_char_p), ("instance", ctypes.c_char_p),
                ("graph_json", ctypes.c_char_p), ("ntensors", ctypes.c_int),
                ("nkernels", ctypes.c_int), ("ndims", ctypes.c_int),
                ("nspecialized", ctypes.c_int), ("workspace", ctypes.c_char_p)]


class _TensorInfo(ctypes.Structure):
    _fields_ = [("uid", ctypes.c_int64), ("name", ctypes.c_char_p), ("dtype", ctypes.c_int),
                ("role", ctypes.c_int), ("ndim", ctypes.c_int),
                ("dims", ctypes.c_int64 * MAX_DIMS), ("dim_names", ctypes.c_char_p * MAX_DIMS),
                ("strides", ctypes.c_int64 * MAX_DIMS),
                ("stride_exprs", ctypes.c_char_p * MAX_DIMS), ("align", ctypes.c_uint32),
                ("value", ctypes.c_double)]


class _KernelInfo(ctypes.Structure):
    _fields_ = [("symbol", ctypes.c_char_p), ("engine", ctypes.c_char_p),
                ("plan_id", ctypes.c_char_p), ("block", ctypes.c_uint * 3),
                ("cluster", ctypes.c_uint * 3), ("smem", ctypes.c_uint),
                ("grid", ctypes.c_char_p * 3), ("nparams", ctypes.c_int),
                ("nimages", ctypes.c_int), ("pdl", ctypes.c_int)]


TensorInfo = namedtuple("TensorInfo", "index uid name dtype role dims strides align value")
KernelInfo = namedtuple("KernelInfo", "symbol engine plan_id block grid cluster smem archs")

_LIB = None
_LIB_LOCK = threading.Lock()
_RT = None


def _candidates():
    env = os.environ.get("KILN_RT_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [os.path.join(here, "_native", "lib", "libkilnrt.so"),  # an installed package
             os.path.join(here, "..", "build", "libkilnrt.so"),
             os.path.join(here, "..", "..", "build", "libkilnrt.so")]
    found = ctypes.util.find_library("kilnrt")
    return [p for p in paths if os.path.exists(p)] + ([found] if found else [])


def load_library():
    """Loads libkilnrt once and declares its functions; returns the ctypes library."""
    global _LIB
    with _LIB_LOCK:
        if _LIB is not None:
            return _LIB
        errors = []
        for path in _candidates():
            try:
                lib = ctypes.CDLL(path)
                break
            except OSError as e:
                errors.append(str(e))
        else:
            raise OSError("libkilnrt not found (set KILN_RT_LIB, or build build/libkilnrt.so)"
                          + (": " + "; ".join(errors) if errors else ""))
        P, I, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_int
        sigs = {
            "kiln_errstr": (ctypes.c_char_p, [I]),
            "kiln_rt_create": (S, [ctypes.POINTER(P)]),
            "kiln_rt_destroy": (S, [P]),
            "kiln_rt_errmsg": (ctypes.c_char_p, [P]),
            "kiln_rt_driver_version": (S, [P, ctypes.POINTER(I)]),
            "kiln_pack_open": (S, [P, ctypes.c_char_p, ctypes.POINTER(P)]),
            "kiln_pack_open_memory": (S, [P, P, ctypes.c_size_t, ctypes.POINTER(P)]),
            "kiln_pack_close": (S, [P]),
            "kiln_pack_info_get": (S, [P, ctypes.POINTER(_PackInfo)]),
            "kiln_pack_plan_at": (S, [P, I, ctypes.POINTER(P)]),
            "kiln_plan_get": (S, [P, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(P)]),
            "kiln_plan_load": (S, [P]),
            "kiln_plan_info_get": (S, [P, ctypes.POINTER(_PlanInfo)]),
            "kiln_plan_tensor": (S, [P, I, ctypes.POINTER(_TensorInfo)]),
            "kiln_plan_dim": (S, [P, I, ctypes.POINTER(ctypes.c_char_p)]),
            "kiln_plan_specialized": (S, [P, I, ctypes.POINTER(ctypes.c_char_p),
                                          ctypes.POINTER(ctypes.c_int64)]),
            "kiln_plan_kernel": (S, [P, I, ctypes.POINTER(_KernelInfo)]),
            "kiln_plan_kernel_image": (S, [P, I, I, ctypes.POINTER(ctypes.c_char_p),
                                           ctypes.POINTER(P), ctypes.POINTER(ctypes.c_size_t)]),
            "kiln_bind_create": (S, [P, ctypes.POINTER(P)]),
            "kiln_bind_destroy": (S, [P]),
            "kiln_bind_reset": (S, [P]),
            "kiln_bind_tensor": (S, [P, ctypes.c_char_p, ctypes.c_ulonglong, I,
                                     ctypes.POINTER(ctypes.c_int64),
                                     ctypes.POINTER(ctypes.c_int64), I]),
            "kiln_bind_scalar": (S, [P, ctypes.c_char_p, ctypes.c_double]),
            "kiln_bind_dim": (S, [P, ctypes.c_char_p, ctypes.c_int64]),
            "kiln_plan_workspace_size": (S, [P, P, ctypes.POINTER(ctypes.c_size_t)]),
            "kiln_bind_workspace": (S, [P, ctypes.c_ulonglong, ctypes.c_size_t]),
            "kiln_bind_check": (S, [P, P]),
            "kiln_launch": (S, [P, P, P]),
        }
        for name, (res, args) in sigs.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        _LIB = lib
        return lib


def _lib():
    return _LIB if _LIB is not None else load_library()


def _runtime():
    """The process-wide kiln_rt (created on first use, never destroyed)."""
    global _RT
    lib = _lib()
    with _LIB_LOCK:
        if _RT is None:
            rt = ctypes.c_void_p()
            st = lib.kiln_rt_create(ctypes.byref(rt))
            if st:
                raise KilnError(st)
            _RT = rt
        return _RT


def _check(status):
    if status:
        raise KilnError(status, (_lib().kiln_rt_errmsg(_RT) or b"").decode(errors="replace"))


def driver_version():
    """cuDriverGetVersion (e.g. 13000); raises KilnError(KILN_ERR_NO_DRIVER) without one."""
    v = ctypes.c_int()
    _check(_lib().kiln_rt_driver_version(_runtime(), ctypes.byref(v)))
    return v.value


class Pack:
    """An opened pack file (or bytes). Plans are looked up with .plan(graph, instance)."""

    def __init__(self, path=None, data=None):
        lib, rt = _lib(), _runtime()
        self._handle = ctypes.c_void_p()
        self._data = None
        if (path is None) == (data is None):
            raise ValueError("Pack needs exactly one of path= or data=")
        if path is not None:
            _check(lib.kiln_pack_open(rt, os.fsencode(path), ctypes.byref(self._handle)))
        else:
            self._data = ctypes.create_string_buffer(bytes(data), len(data))  # kept alive
            _check(lib.kiln_pack_open_memory(rt, self._data, len(data), ctypes.byref(self._handle)))
        self._plans = {}

    def close(self):
        if self._handle:
            _lib().kiln_pack_close(self._handle)
            self._handle = ctypes.c_void_p()
            self._plans = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def info(self):
        i = _PackInfo()
        _check(_lib().kiln_pack_info_get(self._handle, ctypes.byref(i)))
        return {"format_version": i.format_version, "checksum": i.checksum, "size": i.size,
                "nplans": i.nplans, "nimages": i.nimages}

    def plans(self):
        """Every plan of the pack, in pack order."""
        out = []
        for i in range(self.info["nplans"]):
            h = ctypes.c_void_p()
            _check(_lib().kiln_pack_plan_at(self._handle, i, ctypes.byref(h)))
            out.append(self._wrap(h))
        return out

    def plan(self, graph, instance=""):
        """The plan of `graph` for instance key `instance` ("H=4096"; "" = the only one)."""
        h = ctypes.c_void_p()
        _check(_lib().kiln_plan_get(self._handle, graph.encode(),
                                    instance.encode() if instance is not None else None,
                                    ctypes.byref(h)))
        return self._wrap(h)

    def _wrap(self, h):
        if h.value not in self._plans:
            self._plans[h.value] = Plan(self, h)
        return self._plans[h.value]


def _torch_dtypes():
    import torch
    table = {torch.float32: 1, torch.float16: 2, torch.bfloat16: 3, torch.int32: 7,
             torch.int64: 8, torch.bool: 9}
    for name, code in (("float8_e4m3fn", 4), ("float8_e5m2", 5), ("float8_e8m0fnu", 6)):
        if hasattr(torch, name):
            table[getattr(torch, name)] = code
    return table


_CAI_DTYPES = {"<f4": 1, "<f2": 2, "<i4": 7, "<i8": 8, "|b1": 9, "|u1": 9}


def torch_dtype(name):
    """The torch dtype of a kiln dtype name (TensorInfo.dtype), e.g. "bf16": torch.bfloat16."""
    code = DTYPES.index(name) if name in DTYPES else -1
    for t, c in _torch_dtypes().items():
        if c == code:
            return t
    raise KilnError(KILN_ERR_DTYPE, "kiln dtype %s has no torch dtype" % name)


class Plan:
    """One graph instance of a pack; call it to launch: plan(x=..., y=..., T=...)."""

    def __init__(self, pack, handle):
        self._pack = pack  # keeps the pack open
        self._h = handle
        lib = _lib()
        pi = _PlanInfo()
        _check(lib.kiln_plan_info_get(handle, ctypes.byref(pi)))
        self.graph = pi.graph.decode()
        self.instance = pi.instance.decode()
        self.graph_json = pi.graph_json.decode()
        # workspace size rule in bytes before rounding up to 256 ("ceil(T*4096/2)"), or None
        self.workspace = pi.workspace.decode() if pi.workspace else None
        self._workspaces = {}  # (device, stream) -> torch uint8 tensor
        self._ws_lock = threading.Lock()
        self.tensors = []
        for i in range(pi.ntensors):
            t = _TensorInfo()
            _check(lib.kiln_plan_tensor(handle, i, ctypes.byref(t)))
            dims = tuple(t.dim_names[j].decode() if t.dim_names[j] else t.dims[j]
                         for j in range(t.ndim))
            strides = tuple(t.stride_exprs[j].decode() if t.stride_exprs[j] else t.strides[j]
                            for j in range(t.ndim))
            self.tensors.append(TensorInfo(i, t.uid, t.name.decode(), DTYPES[t.dtype],
                                           ROLES[t.role], dims, strides, t.align, t.value))
        self.dims = []
        for d in range(pi.ndims):
            name = ctypes.c_char_p()
            _check(lib.kiln_plan_dim(handle, d, ctypes.byref(name)))
            self.dims.append(name.value.decode())
        self.specialized = {}
        for d in range(pi.nspecialized):
            name, value = ctypes.c_char_p(), ctypes.c_int64()
            _check(lib.kiln_plan_specialized(handle, d, ctypes.byref(name), ctypes.byref(value)))
            self.specialized[name.value.decode()] = value.value
        self.kernels = []
        for k in range(pi.nkernels):
            ki = _KernelInfo()
            _check(lib.kiln_plan_kernel(handle, k, ctypes.byref(ki)))
            archs = []
            for m in range(ki.nimages):
                arch, size = ctypes.c_char_p(), ctypes.c_size_t()
                _check(lib.kiln_plan_kernel_image(handle, k, m, ctypes.byref(arch), None,
                                                  ctypes.byref(size)))
                archs.append((arch.value.decode(), size.value))
            self.kernels.append(KernelInfo(ki.symbol.decode(), ki.engine.decode(),
                                           ki.plan_id.decode(), tuple(ki.block),
                                           tuple(g.decode() for g in ki.grid),
                                           tuple(ki.cluster), ki.smem, archs))
        self._bound_names = [t.name for t in self.tensors if t.role in ("input", "output")]
        self._scalar_names = {t.name for t in self.tensors if t.role == "scalar"}
        self._local = threading.local()  # one kiln_bind per thread

    def __repr__(self):
        inst = " [%s]" % self.instance if self.instance else ""
        return "<kiln.Plan %s%s: %s>" % (self.graph, inst, ", ".join(
            "%s%s" % (t.name, list(t.dims)) for t in self.tensors if t.role not in ("virtual", "scratch")))

    def load(self):
        """Loads the plan's modules into the current CUDA context now (before graph capture)."""
        _check(_lib().kiln_plan_load(self._h))

    def _binding(self):
        b = getattr(self._local, "bind", None)
        if b is None:
            b = ctypes.c_void_p()
            _check(_lib().kiln_bind_create(self._h, ctypes.byref(b)))
            self._local.bind = b
            self._local.finalizer = _BindFinalizer(b)
        return b

    def bind(self, *args, **kwargs):
        """Binds tensors (positional: the input/output tensors in plan order), scalars and
        dims; returns (binding handle, stream guess, device index). Used by __call__."""
        lib = _lib()
        b = self._binding()
        lib.kiln_bind_reset(b)
        if len(args) > len(self._bound_names):
            raise KilnError(KILN_ERR_INVALID_ARG, "%d positional tensors; plan %s takes %d (%s)"
                            % (len(args), self.graph, len(self._bound_names),
                               ", ".join(self._bound_names)))
        values = dict(zip(self._bound_names, args))
        for k, v in kwargs.items():
            if k in values:
                raise KilnError(KILN_ERR_INVALID_ARG, "tensor '%s' given twice" % k)
            values[k] = v
        device = None
        for name, v in values.items():
            key = name.encode()
            if name in self._scalar_names:
                _check(lib.kiln_bind_scalar(b, key, float(v)))
            elif isinstance(v, int) and not isinstance(v, bool):
                _check(lib.kiln_bind_dim(b, key, v))
            else:
                ptr, shape, strides, dtype, dev = _describe(name, v)
                if device is None:
                    device = dev
                n = len(shape)
                dims = (ctypes.c_int64 * max(n, 1))(*shape)
                st = (ctypes.c_int64 * max(n, 1))(*strides)
                _check(lib.kiln_bind_tensor(b, key, ptr, n, dims, st, dtype))
        return b, device

    def check(self, *args, **kwargs):
        """Binds and checks without launching (no GPU needed for the check itself). A plan
        that needs a workspace gets a stand-in for the check (nothing is allocated)."""
        b, _ = self.bind(*args, **kwargs)
        if self.workspace is not None:
            size = self._workspace_bytes(b)
            if size:
                _check(_lib().kiln_bind_workspace(b, 256, size))  # aligned, never dereferenced
        _check(_lib().kiln_bind_check(self._h, b))

    def workspace_size(self, *args, **kwargs):
        """Bytes of workspace the plan needs (a multiple of 256; 0 when it needs none) for
        the dynamic dims given as ints (T=4096) or implied by tensors, as for a call."""
        if self.workspace is None:
            return 0
        b, _ = self.bind(*args, **kwargs)
        return self._workspace_bytes(b)

    def _workspace_bytes(self, b):
        n = ctypes.c_size_t()
        _check(_lib().kiln_plan_workspace_size(self._h, b, ctypes.byref(n)))
        return n.value

    def _workspace(self, device, handle, size):
        """A torch uint8 CUDA tensor of >= size bytes for launches on (device, stream).
        Launches on one stream are ordered, so they can share it; it is allocated on that
        stream, so that torch never hands its memory out before the stream is done with it
        (also when it is replaced by a larger one)."""
        import torch
        if device is None:
            device = torch.cuda.current_device()
        key = (device, handle.value or 0)
        with self._ws_lock:
            ws = self._workspaces.get(key)
            if ws is None or ws.numel() < size:
                self._workspaces.pop(key, None)
                ws = None  # let torch reuse the old block for the new one
                dev = torch.device("cuda", device)
                current = torch.cuda.current_stream(dev)
                if (handle.value or 0) == current.cuda_stream:
                    ws = torch.empty(size, dtype=torch.uint8, device=dev)
                else:
                    ext = (torch.cuda.ExternalStream(handle.value, device=dev) if handle.value
                           else torch.cuda.default_stream(dev))
                    with torch.cuda.stream(ext):
                        ws = torch.empty(size, dtype=torch.uint8, device=dev)
                self._workspaces[key] = ws
            return ws

    def free_workspaces(self):
        """Drops the workspaces this plan's launches allocated (torch frees them once the
        streams that used them are done); the next launch allocates again. Every thread's
        next launch binds afresh, so none reuses a freed workspace."""
        with self._ws_lock:
            self._workspaces.clear()
            self._local = threading.local()

    def __call__(self, *args, stream=None, **kwargs):
        """Binds torch CUDA tensors by name (or positionally), ints as dynamic dims, floats
        as runtime scalars, and launches on `stream` (default: torch's current stream on
        the tensors' device). Outputs are written in place; returns None."""
        # Fast path: the same tensors (pointers, shapes, strides, dtypes), scalars and stream
        # as this thread's last call launch with the binding as it stands (no ctypes binds).
        key = _call_key(args, kwargs, stream)
        local = self._local
        if key is not None and key == getattr(local, "last_key", None):
            _check(_lib().kiln_launch(self._h, local.bind, local.last_handle))
            return
        local.last_key = None
        b, device = self.bind(*args, **kwargs)
        handle = _stream_handle(stream, device)
        if self.workspace is not None:
            size = self._workspace_bytes(b)
            if size:
                try:
                    ws = self._workspace(device, handle, size)
                except ImportError:
                    raise KilnError(KILN_ERR_UNBOUND, "plan %s needs %d bytes of workspace (%s);"
                                    " allocating it needs torch" % (self.graph, size,
                                                                    self.workspace))
                _check(_lib().kiln_bind_workspace(b, ws.data_ptr(), size))
        if device is not None and _torch_loaded():
            import torch
            if device != torch.cuda.current_device():
                with torch.cuda.device(device):
                    _check(_lib().kiln_launch(self._h, b, handle))
                return
        _check(_lib().kiln_launch(self._h, b, handle))
        if key is not None:
            local.last_key, local.last_handle = key, handle


def _call_key(args, kwargs, stream):
    """What a call binds, as a comparable tuple (None when it cannot be summarized): each
    torch tensor by pointer, shape, strides, dtype and device; plus the current stream."""
    if not _torch_loaded():
        return None
    import torch
    parts = []
    for name, v in list(enumerate(args)) + sorted(kwargs.items()):
        if isinstance(v, torch.Tensor):
            if not v.is_cuda:
                return None
            parts.append((name, v.data_ptr(), v.shape, v.stride(), v.dtype, v.device.index))
        elif isinstance(v, (int, float)):
            parts.append((name, v))
        else:
            return None
    if stream is None:
        dev = next((p[5] for p in parts if len(p) == 6), None)
        stream = torch.cuda.current_stream(dev).cuda_stream if dev is not None else None
    elif hasattr(stream, "cuda_stream"):
        stream = stream.cuda_stream
    return (tuple(parts), stream)


class _BindFinalizer:
    """Destroys a thread's kiln_bind when the thread's local storage goes away."""

    def __init__(self, b):
        self.b = b

    def __del__(self):
        if _LIB is not None and self.b:
            _LIB.kiln_bind_destroy(self.b)


def _torch_loaded():
    import sys
    return "torch" in sys.modules


_TORCH_DTYPES = None


def _describe(name, v):
    """(pointer, shape, strides in elements, kiln dtype, CUDA device index or None)."""
    global _TORCH_DTYPES
    if _torch_loaded():
        import torch
        if isinstance(v, torch.Tensor):
            if _TORCH_DTYPES is None:
                _TORCH_DTYPES = _torch_dtypes()
            if not v.is_cuda:
                raise KilnError(KILN_ERR_INVALID_ARG, "tensor '%s' is on %s, not a CUDA device"
                                % (name, v.device))
            dtype = _TORCH_DTYPES.get(v.dtype)
            if dtype is None:
                raise KilnError(KILN_ERR_DTYPE, "tensor '%s': torch dtype %s has no kiln dtype"
                                % (name, v.dtype))
            return v.data_ptr(), tuple(v.shape), tuple(v.stride()), dtype, v.device.index
    cai = getattr(v, "__cuda_array_interface__", None)
    if cai is not None:
        dtype = _CAI_DTYPES.get(cai["typestr"])
        if dtype is None:
            raise KilnError(KILN_ERR_DTYPE, "tensor '%s': typestr %s has no kiln dtype"
                            % (name, cai["typestr"]))
        item = int(cai["typestr"][2:])
        shape = tuple(cai["shape"])
        strides = cai.get("strides")
        if strides is None:
            acc, out = 1, []
            for d in reversed(shape):
                out.append(acc)
                acc *= d
            strides = tuple(reversed(out))
        else:
            strides = tuple(s // item for s in strides)
        return cai["data"][0], shape, strides, dtype, None
    raise KilnError(KILN_ERR_INVALID_ARG, "'%s' must be a CUDA tensor, an int (dim) or a float"
                    " (scalar), not %s" % (name, type(v).__name__))


def _stream_handle(stream, device):
    """A CUstream as a c_void_p from None (torch's current stream), an int, a
    torch.cuda.Stream (.cuda_stream) or a cupy stream (.ptr)."""
    if stream is None:
        if device is not None and _torch_loaded():
            import torch
            return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)
        return ctypes.c_void_p(0)
    for attr in ("cuda_stream", "ptr"):
        if hasattr(stream, attr):
            return ctypes.c_void_p(getattr(stream, attr))
    return ctypes.c_void_p(int(stream))


def _kiln_executable():
    env = os.environ.get("KILN")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for p in (os.path.join(here, "_native", "bin", "kiln"), os.path.join(here, "..", "..", "build", "kiln"),
              os.path.join(here, "..", "build", "kiln")):
        if os.path.exists(p):
            return p
    import shutil
    return shutil.which("kiln") or "kiln"


def build(*specs, sm=None, set=None, out=None):
    """JIT at load time: compiles specs through the kiln cache (only what the cache lacks)
    for `sm` (default: the current torch device's, else 90a) and returns the opened Pack.
    `set` fixes dims ({"H": 4096}); `out` keeps the pack file (default: a temporary)."""
    import subprocess
    import tempfile
    if sm is None:
        sm = "90a"
        if _torch_loaded():
            import torch
            if torch.cuda.is_available():
                major, minor = torch.cuda.get_device_capability()
                sm = "%d%d%s" % (major, minor, "a" if major in (9, 10) else "")
    sms = [sm] if isinstance(sm, str) else list(sm)
    path = out or os.path.join(tempfile.mkdtemp(prefix="kiln-"), "jit.kpack")
    cmd = [_kiln_executable(), "build", *specs, "-o", path]
    for s in sms:
        cmd += ["--sm", str(s)]
    for k, v in (set or {}).items():
        cmd += ["--set", "%s=%d" % (k, v)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise KilnError(KILN_ERR_INVALID_ARG, (r.stderr or r.stdout).strip())
    return Pack(path)
