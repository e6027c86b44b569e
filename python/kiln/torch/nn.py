"""kiln.torch.nn: drop-in modules whose forward and backward are kiln kernels.

    from kiln.torch import nn as knn
    model.norm = knn.RMSNorm(4096, eps=1e-6)        # in place of torch.nn.RMSNorm
    y, h = knn.FusedAddRMSNorm(4096)(x, residual)   # h = x + residual, y = rmsnorm(h) * w

Each module writes the spec of its forward and backward for its hidden size, eps and dtype
(into the kiln cache folder's specs/), JIT-builds it through the cache for the current GPU on
first use and pairs the two plans with kiln.torch.function. Inputs [..., hidden], bf16 or fp16.
"""
import hashlib
import os

import torch

from .. import KilnError, KILN_ERR_INVALID_ARG, build
from . import function

__all__ = ["RMSNorm", "LayerNorm", "FusedAddRMSNorm"]

_HEAD = 'local k = require "kiln"\nlocal H, EPS, DT = %(H)d, %(eps)r, "%(dtype)s"\nlocal dims = { T = k.dynamic }\n'

# forward graph "fwd" and backward graph "bwd" of each module, by kiln.torch.function's names
_SPECS = {
    "rmsnorm": """return {
  k.graph "fwd" { dims = dims, dtype = DT, inputs = { x = { "T", H }, w = { H } },
    body = function(g, x, w)
      local y, inv_rms = g:rmsnorm(x, w, { epsilon = EPS, phase = "training" })
      return { y = y, inv_rms = inv_rms }
    end },
  k.graph "bwd" { dims = dims, dtype = DT,
    inputs = { dy = { "T", H }, x = { "T", H }, w = { H }, inv_rms = { "T", 1, dtype = "fp32" } },
    body = function(g, dy, x, w, inv_rms)
      local dx, dw = g:rmsnorm_backward(dy, x, w, inv_rms)
      return { dx = dx, dw = dw }
    end },
}
""",
    "layernorm": """return {
  k.graph "fwd" { dims = dims, dtype = DT, inputs = { x = { "T", H }, w = { H }, b = { H } },
    body = function(g, x, w, b)
      local y, mean, inv_std = g:layernorm(x, w, b, { epsilon = EPS, phase = "training" })
      return { y = y, mean = mean, inv_std = inv_std }
    end },
  k.graph "bwd" { dims = dims, dtype = DT,
    inputs = { dy = { "T", H }, x = { "T", H }, w = { H }, mean = { "T", 1, dtype = "fp32" },
               inv_std = { "T", 1, dtype = "fp32" } },
    body = function(g, dy, x, w, mean, inv_std)
      local dx, dw, db = g:layernorm_backward(dy, x, w, mean, inv_std)
      return { dx = dx, dw = dw, db = db }
    end },
}
""",
    # h = x + r feeds both the norm and the next residual: its gradient is dh plus the norm's
    "add_rmsnorm": """return {
  k.graph "fwd" { dims = dims, dtype = DT, inputs = { x = { "T", H }, r = { "T", H }, w = { H } },
    body = function(g, x, r, w)
      local h = x + r
      local y, inv_rms = g:rmsnorm(h, w, { epsilon = EPS, phase = "training" })
      return { y = y, h = h, inv_rms = inv_rms }
    end },
  k.graph "bwd" { dims = dims, dtype = DT,
    inputs = { dy = { "T", H }, dh = { "T", H }, h = { "T", H }, w = { H }, inv_rms = { "T", 1, dtype = "fp32" } },
    body = function(g, dy, dh, h, w, inv_rms)
      local dn, dw = g:rmsnorm_backward(dy, h, w, inv_rms)
      local dx = dn + dh
      return { dx = dx, dr = g:identity(dx), dw = dw }
    end },
}
""",
}

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
_BUILT = {}  # (kind, hidden, eps, dtype) -> kiln.torch.function


def _spec_dir():
    base = os.environ.get("KILN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "kiln")
    d = os.path.join(base, "specs")
    os.makedirs(d, exist_ok=True)
    return d


def _function(kind, hidden, eps, dtype):
    key = (kind, hidden, float(eps), dtype)
    if key not in _BUILT:
        if dtype not in _DTYPES:
            raise KilnError(KILN_ERR_INVALID_ARG, "kiln.torch.nn: dtype %s; bf16 and fp16 are built" % dtype)
        text = _HEAD % {"H": hidden, "eps": float(eps), "dtype": _DTYPES[dtype]} + _SPECS[kind]
        path = os.path.join(_spec_dir(), "%s_%s.lua" % (kind, hashlib.sha1(text.encode()).hexdigest()[:16]))
        if not os.path.exists(path):  # written once, by rename: concurrent processes see it whole
            tmp = "%s.%d.tmp" % (path, os.getpid())
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, path)
        pack = build(path)
        _BUILT[key] = function(pack.plan("fwd"), pack.plan("bwd"), name="%s_%d_%s" % (kind, hidden, _DTYPES[dtype]))
    return _BUILT[key]


class _Norm(torch.nn.Module):
    def __init__(self, kind, hidden, eps, bias, device, dtype):
        super().__init__()
        self.kind, self.hidden, self.eps = kind, hidden, eps
        self.weight = torch.nn.Parameter(torch.ones(hidden, device=device, dtype=dtype))
        self.bias = torch.nn.Parameter(torch.zeros(hidden, device=device, dtype=dtype)) if bias else None

    def _rows(self, x):
        if x.shape[-1] != self.hidden:
            raise KilnError(KILN_ERR_INVALID_ARG, "%s: x is %s; its last dim must be %d"
                            % (type(self).__name__, tuple(x.shape), self.hidden))
        return x.reshape(-1, self.hidden).contiguous()

    def extra_repr(self):
        return "%d, eps=%g, kiln" % (self.hidden, self.eps)


class RMSNorm(_Norm):
    """y = x / sqrt(mean(x^2) + eps) * weight over the last dim."""

    def __init__(self, hidden, eps=1e-6, device="cuda", dtype=torch.bfloat16):
        super().__init__("rmsnorm", hidden, eps, False, device, dtype)

    def forward(self, x):
        f = _function(self.kind, self.hidden, self.eps, x.dtype)
        return f.fwd.named(f(x=self._rows(x), w=self.weight))["y"].view(x.shape)


class LayerNorm(_Norm):
    """y = (x - mean) / sqrt(var + eps) * weight + bias over the last dim."""

    def __init__(self, hidden, eps=1e-5, device="cuda", dtype=torch.bfloat16):
        super().__init__("layernorm", hidden, eps, True, device, dtype)

    def forward(self, x):
        f = _function(self.kind, self.hidden, self.eps, x.dtype)
        return f.fwd.named(f(x=self._rows(x), w=self.weight, b=self.bias))["y"].view(x.shape)


class FusedAddRMSNorm(_Norm):
    """(y, h): h = x + residual, y = rmsnorm(h) * weight, in one kernel each way."""

    def __init__(self, hidden, eps=1e-6, device="cuda", dtype=torch.bfloat16):
        super().__init__("add_rmsnorm", hidden, eps, False, device, dtype)

    def forward(self, x, residual):
        f = _function(self.kind, self.hidden, self.eps, x.dtype)
        out = f.fwd.named(f(x=self._rows(x), r=self._rows(residual), w=self.weight))
        y, h = out["y"], out["h"]
        return y.view(x.shape), h.view(x.shape)
