"""kiln.torch: kiln plans as PyTorch operators (torch.library custom ops) that torch.compile
traces without a graph break, CUDA graphs capture, and autograd differentiates.

    import kiln, kiln.torch
    pack = kiln.build("specs/rmsnorm.lua", "specs/rmsnorm_bwd.lua", set={"H": 4096})
    rms = kiln.torch.op(pack.plan("rmsnorm_train", "H=4096"))
    y, inv_rms = rms(x, w)           # outputs allocated here, launched on torch's current stream
    f = kiln.torch.function(pack.plan("rmsnorm_train", "H=4096"), pack.plan("rmsnorm_bwd", "H=4096"))
    y, inv_rms = f(x, w)             # y.backward(g) fills x.grad and w.grad through rmsnorm_bwd

An op takes the plan's inputs in plan order or by name (tensors, then runtime scalars as
floats) and returns its outputs (one tensor, or a tuple in plan order; op.named(result) maps
them by name). Output shapes come from the
inputs' shapes and the plan's specialized dims, so the fake (meta) implementation needs no
GPU. `function` pairs a forward and a backward plan by port names: a backward input `dY`
receives the gradient of the forward output `Y`, any other backward input is the forward
tensor of that name (saved), and a backward output `dX` is the gradient of forward input `X`;
forward outputs with no `d` input in the backward carry no gradient, nor does an op that no
`function` paired with a backward.
"""
import ast
import hashlib
import operator
import re

import torch

from .. import KilnError, KILN_ERR_INVALID_ARG, Plan, torch_dtype

__all__ = ["op", "function"]

_LIB = torch.library.Library("kiln", "FRAGMENT")
_OPS = {}  # qualified name -> KilnOp


_ARITH = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}


def _expr(text, env):
    """The value of a dim or stride expression ("S*H*D") over the dims in env."""
    if isinstance(text, int):
        return text
    if text in env:
        return env[text]

    def ev(n):
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.Name):
            if n.id not in env:
                raise KilnError(KILN_ERR_INVALID_ARG, "dim %s is given by no input of the plan" % n.id)
            return env[n.id]
        if isinstance(n, ast.BinOp) and type(n.op) in _ARITH:
            return _ARITH[type(n.op)](ev(n.left), ev(n.right))
        raise KilnError(KILN_ERR_INVALID_ARG, "cannot evaluate the expression %r" % text)
    return ev(ast.parse(str(text), mode="eval").body)


class KilnOp:
    """A plan registered as the custom op torch.ops.kiln.<name>; call it like a function."""

    def __init__(self, plan, name=None):
        if not isinstance(plan, Plan):
            raise KilnError(KILN_ERR_INVALID_ARG, "kiln.torch.op takes a kiln.Plan (pack.plan(graph, instance))")
        self.plan = plan
        self.inputs = [t for t in plan.tensors if t.role == "input"]
        self.scalars = [t for t in plan.tensors if t.role == "scalar"]
        self.outputs = [t for t in plan.tensors if t.role == "output"]
        if not self.outputs:
            raise KilnError(KILN_ERR_INVALID_ARG, "plan %s has no outputs" % plan.graph)
        digest = hashlib.sha1((plan.graph_json + plan.instance).encode()).hexdigest()[:10]
        base = name or "%s_%s" % (plan.graph, plan.instance)
        self.name = "%s_%s" % (re.sub(r"\W", "_", base).strip("_"), digest)
        self.qualname = "kiln::" + self.name
        self.grad = None  # the _Function that differentiates it (kiln.torch.function)
        if self.qualname not in _OPS:
            self._register()
            _OPS[self.qualname] = self
        self.op = getattr(torch.ops.kiln, self.name).default

    def _schema(self):
        args = ["Tensor %s" % t.name for t in self.inputs] + ["float %s" % t.name for t in self.scalars]
        rets = "Tensor" if len(self.outputs) == 1 else "(%s)" % ", ".join("Tensor" for _ in self.outputs)
        return "(%s) -> %s" % (", ".join(args), rets)

    def _env(self, tensors):
        """Dim name -> size, from the inputs' shapes and the plan's specialized dims."""
        env = dict(self.plan.specialized)
        for t, x in zip(self.inputs, tensors):
            if x.dim() != len(t.dims):
                raise KilnError(KILN_ERR_INVALID_ARG, "%s: input %s has %d dims, the plan's has %d (%s)"
                                % (self.name, t.name, x.dim(), len(t.dims), list(t.dims)))
            for d, n in zip(t.dims, x.shape):
                if isinstance(d, str) and d not in env:
                    env[d] = n
        return env

    def _empty_outputs(self, tensors):
        env = self._env(tensors)
        device = tensors[0].device if tensors else torch.device("cuda")
        outs = []
        for t in self.outputs:
            shape = [_expr(d, env) for d in t.dims]
            stride = [_expr(s, env) for s in t.strides]
            outs.append(torch.empty_strided(shape, stride, dtype=torch_dtype(t.dtype), device=device))
        return outs

    def _register(self):
        _LIB.define(self.name + self._schema())
        n_in = len(self.inputs)

        def run(*args):
            tensors = args[:n_in]
            outs = self._empty_outputs(tensors)
            kw = {t.name: x for t, x in zip(self.inputs, tensors)}
            kw.update({t.name: float(v) for t, v in zip(self.scalars, args[n_in:])})
            kw.update({t.name: o for t, o in zip(self.outputs, outs)})
            self.plan(**kw)
            return outs[0] if len(outs) == 1 else tuple(outs)

        def fake(*args):
            outs = self._empty_outputs(args[:n_in])
            return outs[0] if len(outs) == 1 else tuple(outs)

        _LIB.impl(self.name, run, "CUDA")
        torch.library.register_fake(self.qualname, fake, lib=_LIB)
        # the autograd formula is registered with the op, once, and finds its backward plan when
        # kiln.torch.function gives it one: registered later, a formula is missed by what
        # torch.compile already traced of the op (no gradients, silently)
        torch.library.register_autograd(self.qualname, self._backward, setup_context=self._setup, lib=_LIB)

    def _setup(self, ctx, inputs, output):
        if self.grad is None:  # no backward plan: the outputs carry no gradient
            ctx.mark_non_differentiable(*(output if isinstance(output, tuple) else (output,)))
            return
        self.grad._setup(ctx, inputs, output)

    def _backward(self, ctx, *grads):
        if self.grad is None:
            raise KilnError(KILN_ERR_INVALID_ARG, "%s has no backward plan (kiln.torch.function pairs one)" % self.name)
        return self.grad._backward(ctx, *grads)

    def __call__(self, *args, **kwargs):
        return self.op(*args, **kwargs)

    def named(self, result):
        """The op's result as {output name: tensor} (outputs come in the plan's order)."""
        outs = result if isinstance(result, tuple) else (result,)
        return {t.name: o for t, o in zip(self.outputs, outs)}

    def __repr__(self):
        return "<kiln.torch op torch.ops.%s: %s>" % (self.qualname.replace("::", "."), self._schema())


def op(plan, name=None):
    """Registers `plan` (a kiln.Plan) as a torch custom op once; returns its callable."""
    return KilnOp(plan, name)


class _Function:
    """A forward op with a backward op registered as its autograd formula (see module doc)."""

    def __init__(self, fwd, bwd, name=None):
        self.fwd = fwd if isinstance(fwd, KilnOp) else KilnOp(fwd, name)
        self.bwd = bwd if isinstance(bwd, KilnOp) else KilnOp(bwd)
        f_in = [t.name for t in self.fwd.inputs]
        f_out = [t.name for t in self.fwd.outputs]
        self.grad_of = {}  # backward input index -> forward output index
        self.saved = {}    # backward input index -> ("in" | "out", index)
        for i, t in enumerate(self.bwd.inputs):
            n = t.name
            if n.startswith("d") and n[1:] in f_out:
                self.grad_of[i] = f_out.index(n[1:])
            elif n in f_in:
                self.saved[i] = ("in", f_in.index(n))
            elif n in f_out:
                self.saved[i] = ("out", f_out.index(n))
            else:
                raise KilnError(KILN_ERR_INVALID_ARG, "backward input %s is neither d<forward output> nor a forward "
                                "tensor (forward inputs %s, outputs %s)" % (n, f_in, f_out))
        if self.bwd.scalars:
            raise KilnError(KILN_ERR_INVALID_ARG, "backward plan %s takes runtime scalars; give them as tensors"
                            % self.bwd.plan.graph)
        self.grad_to = {}  # backward output index -> forward input index
        for j, t in enumerate(self.bwd.outputs):
            if t.name.startswith("d") and t.name[1:] in f_in:
                self.grad_to[j] = f_in.index(t.name[1:])
        _OPS[self.fwd.qualname].grad = self  # the registered op's formula (KilnOp._backward) calls ours

    def _setup(self, ctx, inputs, output):
        outs = output if isinstance(output, tuple) else (output,)
        keep = []
        for i in sorted(self.saved):
            where, k = self.saved[i]
            keep.append(inputs[k] if where == "in" else outs[k])
        ctx.save_for_backward(*keep)
        # outputs whose gradient the backward does not take (inv_rms beside y) carry none
        has_grad = set(self.grad_of.values())
        ctx.mark_non_differentiable(*[o for k, o in enumerate(outs) if k not in has_grad])
        ctx.out_meta = [(o.shape, o.dtype, o.device) for o in outs]

    def _backward(self, ctx, *grads):
        saved = iter(ctx.saved_tensors)
        args = []
        for i in range(len(self.bwd.inputs)):
            if i in self.grad_of:
                k = self.grad_of[i]
                g = grads[k]
                if g is None:
                    shape, dtype, device = ctx.out_meta[k]
                    g = torch.zeros(shape, dtype=dtype, device=device)
                args.append(g.contiguous())
            else:
                args.append(next(saved))
        res = self.bwd(*args)
        res = res if isinstance(res, tuple) else (res,)
        out = [None] * (len(self.fwd.inputs) + len(self.fwd.scalars))
        for j, k in self.grad_to.items():
            want = self.fwd.inputs[k]
            out[k] = res[j].to(torch_dtype(want.dtype))
        return tuple(out)

    def __call__(self, *args, **kwargs):
        return self.fwd(*args, **kwargs)


def function(fwd, bwd, name=None):
    """Pairs forward and backward plans (or ops) by port names; returns the differentiable op."""
    return _Function(fwd, bwd, name)
