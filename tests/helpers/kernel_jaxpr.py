"""Counting what a traced program's Pallas kernels do, from the jaxpr (no TPU needed): what the
kernel tests check the cost estimates and the MXU operand dtypes against.

    pallas_calls(jaxpr)            every pallas_call equation (sub-jaxprs included)
    kernel_dots(kernel_jaxpr)      ([(lhs dtype, rhs dtype, precision, mask?, result dtype)],
                                    dot FLOPs, exp evaluations) of one kernel body
    call_counts(eqn)               (dot FLOPs, exps, bytes of every operand and output) of one
                                   pallas_call over its whole grid
"""

import numpy as np


def pallas_calls(jaxpr):
    """Every pallas_call equation of a jaxpr, sub-jaxprs included."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            yield eqn
        for sub in _subjaxprs(eqn):
            yield from pallas_calls(sub)


def _subjaxprs(eqn):
    for val in eqn.params.values():
        for x in (val if isinstance(val, (tuple, list)) else [val]):
            if hasattr(x, "eqns"):
                yield x
            elif hasattr(x, "jaxpr") and hasattr(x.jaxpr, "eqns"):
                yield x.jaxpr


def _in(var, reads) -> bool:
    return type(var).__name__ != "Literal" and var in reads


def kernel_dots(jaxpr, reads=None):
    """Every dot_general of a kernel jaxpr (sub-jaxprs included) as (lhs dtype, rhs dtype,
    precision, mask?), where mask? = one operand depends on no ref read (a 0/1 mask built from
    iota). Also returns the dot FLOPs and the number of exp evaluations."""
    reads = set(jaxpr.invars) if reads is None else reads
    dots, flops, exps = [], 0, 0
    for eqn in jaxpr.eqns:
        data = any(_in(v, reads) for v in eqn.invars)
        if data:
            reads.update(eqn.outvars)
        name = eqn.primitive.name
        if name == "dot_general":
            lhs, rhs = (v.aval for v in eqn.invars)
            (contract, _), _ = eqn.params["dimension_numbers"]
            flops += 2 * int(np.prod(eqn.outvars[0].aval.shape)) * int(
                np.prod([lhs.shape[d] for d in contract]))
            mask = not all(_in(v, reads) for v in eqn.invars)
            prec = eqn.params["precision"]
            dots.append((lhs.dtype.name, rhs.dtype.name, prec, mask,
                         eqn.params["preferred_element_type"]))
        elif name == "exp":
            exps += int(np.prod(eqn.outvars[0].aval.shape))
        for sub in _subjaxprs(eqn):
            outer = eqn.invars[len(eqn.invars) - len(sub.invars):]
            inner = {sv for sv, v in zip(sub.invars, outer) if _in(v, reads)}
            d, f, e = kernel_dots(sub, inner)
            dots, flops, exps = dots + d, flops + f, exps + e  # pl.when: one branch is empty
    return dots, flops, exps


def call_counts(eqn):
    """FLOPs and exps of the kernel body times the grid size, and the call's operand + output
    bytes: what its pl.CostEstimate should say."""
    steps = int(np.prod(eqn.params["grid_mapping"].grid))
    _, flops, exps = kernel_dots(eqn.params["jaxpr"])
    nbytes = sum(int(np.prod(v.aval.shape)) * v.aval.dtype.itemsize
                 for v in list(eqn.invars) + list(eqn.outvars))
    return flops * steps, exps * steps, nbytes
