"""Operator fusion: a table of rows, one module each, run in order by one driver.

Fusions act only inside one device partition: both ends of every fused edge must be on the
device engine and in the same partition, and the intermediate value must have no other
reader (match.py) — but for the elementwise region row, whose node has an output for each
value read outside the region. Fused nodes record the names of what they absorbed in
`meta.fused`; the driver returns one line per fusion for the compile report. A fused epilogue
(bias, residual sum, activation) travels as `_`-prefixed attributes of the Conv/MatMul/Gemm
that absorbed it; a fused kernel is a node of an op of its own (FusedAttention, EltwiseChain,
EltwiseGraph, and the graphengine domain's ConvDw, ConvBlock, ConvHead: ops/conv_fused.py,
and Rope: ops/attention.py). A row matches a pattern at one node (`match`, `rewrite`) or,
where it finds regions, looks at the whole graph at once (`whole_graph`).

The order of the table is a contract: each row names the rows that must run before it
(`Fusion.after`), and `check_order` refuses a table that breaks one (after torch.fx's
`this_before_that_pass_constraint`). Rows import match.py and, for shared pieces of the
Conv epilogues, each other downwards (conv_head -> conv_block -> conv_dw); nothing imports
this module but its callers, so there is no cycle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ...ir import Graph
from ...passes import PassResult
from ...target import Target
from ...target import get as get_target
from . import (
    activation,
    activation_affine,
    activation_form,
    affine_fold,
    attention,
    conv_bias,
    conv_block,
    conv_bn,
    conv_dw,
    conv_head,
    conv_stride,
    eltwise,
    eltwise_graph,
    erf_gelu,
    group_norm,
    hard_swish,
    layernorm,
    matmul_bias,
    matmul_bn,
    matmul_mul,
    pad_conv,
    parallel_convs,
    residual_add,
    rms_norm,
    rope,
)
from .match import Fusion

__all__ = ["FUSIONS", "Fusion", "check_order", "fuse"]

_EPILOGUES = ("matmul_bias", "residual_add", "activation")
FUSIONS: list[Fusion] = [
    pad_conv.ROW,  # a spatial zero Pad becomes the Conv's own pads, before any row reads them
    # A per-channel constant Add joins the Conv's bias (then a BatchNormalization after it
    # folds into both).
    conv_bias.ROW,
    dataclasses.replace(conv_bn.ROW, after=("conv_bias",)),
    dataclasses.replace(parallel_convs.ROW, after=("conv_bn",)),  # before residual_add
    erf_gelu.ROW,
    layernorm.ROW,
    rms_norm.ROW,
    # The rotary embedding's Muls and Add are its own before any epilogue or chain row
    # could take them.
    rope.ROW,
    rope.TRANSPOSED_ROW,
    dataclasses.replace(attention.ROW, after=("layernorm", "rope_transpose")),
    # The epilogues of a Conv/MatMul/Gemm: bias, then the residual sum, then the activation
    # (oneDNN applies post-ops in that order); a Conv's BatchNormalization is folded first,
    # and the Erf form of GELU must be one Gelu node before it can be an activation.
    dataclasses.replace(matmul_bias.ROW, after=("attention",)),
    matmul_bias.QWEIGHT_ROW,
    # A Linear layer's BatchNorm1d folds into its weights and bias (after the bias joined).
    dataclasses.replace(matmul_bn.ROW, after=("matmul_bias",)),
    # Activations spelled out in arithmetic (GPT-2's gelu_new, SiLU, QuickGELU, other GELU
    # spellings) become their op where they can be an epilogue: after the structural Erf-GELU
    # row has taken its own form and the bias has joined its MatMul/Gemm/Conv.
    dataclasses.replace(activation_form.ROW, after=("erf_gelu", "matmul_bias")),
    # HardSwish written with a Clip (Paddle's export) becomes the op, after the Conv's
    # per-channel affine (a BatchNorm as Mul and Add) joined the Conv, so it can be an epilogue.
    dataclasses.replace(hard_swish.ROW, after=("conv_bias",)),
    dataclasses.replace(residual_add.ROW, after=("conv_bn", "matmul_bias", "matmul_bn",
                                                 "parallel_convs")),
    dataclasses.replace(activation.ROW, after=("conv_bn", "erf_gelu", "activation_form",
                                               "hard_swish", "matmul_bias", "matmul_bn",
                                               "residual_add")),
    # A 1x1 Conv's stride moves up into the Conv that makes its input, epilogues and all
    # (its residual sum subsampled), before the Convs are merged into bigger kernels.
    dataclasses.replace(conv_stride.ROW, after=("residual_add", "activation")),
    # Depthwise, block and head fusions merge Conv nodes that already carry their epilogues
    # into ConvDw, ConvBlock and ConvHead nodes.
    dataclasses.replace(conv_dw.ROW, after=("activation",)),
    dataclasses.replace(conv_block.ROW, after=("conv_dw",)),
    dataclasses.replace(conv_head.ROW, after=("activation", "conv_block")),
    # A plain Conv's second activation (a LeakyRelu's clamp): after the fused convolutions
    # took theirs, which have no second stage.
    dataclasses.replace(activation.SECOND_ROW, after=("activation", "conv_head")),
    # A scalar affine after a plain Conv's activation (PP-LCNetV3's learnable affine block):
    # after the rows that merge Convs into block kernels, which do not take it. A Conv has
    # a second activation or an affine, not both (each row leaves the other's Conv alone).
    dataclasses.replace(activation_affine.ROW, after=("activation", "conv_dw", "conv_block",
                                                      "conv_head")),
    # A gated MLP's product: a MatMul's multiplier, applied after its other epilogues, so
    # after every row that gives a MatMul one (and before the chain row could take the Mul).
    dataclasses.replace(matmul_mul.ROW, after=_EPILOGUES),
    # Runs of constant Muls and Adds no kernel absorbed fold into one Mul and one Add (an
    # InstanceNormalization's identity affine before a GroupNorm's own), before the chain row.
    dataclasses.replace(affine_fold.ROW, after=("conv_bias", "conv_bn", "layernorm", "rms_norm",
                                                "rope", "matmul_bias", "activation_affine")),
    # A group normalization's steps (Reshape, LayerNormalization, Reshape, its affine and
    # activation) are one GroupNorm that stays in the convolutions' format: after the
    # identity affine of an InstanceNormalization-written GroupNorm folded away.
    dataclasses.replace(group_norm.ROW, after=("layernorm", "affine_fold")),
    # Last: the epilogues of Conv/MatMul take their activations first. Elementwise regions
    # that are not plain chains (values read twice, branches meeting, several outputs) are
    # one kernel each, then the chains left are the chain row's.
    dataclasses.replace(eltwise_graph.ROW, after=(*_EPILOGUES, "activation2", "rope", "conv_dw",
                                                  "conv_block", "conv_head", "activation_affine",
                                                  "matmul_mul", "affine_fold", "group_norm")),
    dataclasses.replace(eltwise.ROW, after=("eltwise_graph",)),
]


def check_order(table: Sequence[Fusion], complete: bool = True) -> None:
    """Raise ValueError when a row runs before a row it names in `after`, a name repeats,
    or (`complete`: the full table) a row names one the table does not have."""
    names = [row.name for row in table]
    if len(set(names)) != len(names):
        raise ValueError(f"fusion table repeats a row: {names}")
    seen: set[str] = set()
    for row in table:
        for before in row.after:
            if before not in names and not complete:
                continue  # a part of the table (tests, experiments): only its own order
            if before not in names:
                raise ValueError(f"fusion row '{row.name}' must run after '{before}', which "
                                 f"the table does not have")
            if before not in seen:
                raise ValueError(f"fusion row '{row.name}' must run after '{before}', but the "
                                 f"table has it later")
        seen.add(row.name)


check_order(FUSIONS)


def fuse(graph: Graph, table: Sequence[Fusion] | None = None,
         target: Target | None = None) -> PassResult:
    """Run the rows in order; a row whose `requires` the target (default: the host) does not
    meet, or one of whose `produces` kernels it does not run, is skipped."""
    rows = FUSIONS if table is None else table
    if table is not None:
        check_order(rows, complete=False)
    target = target or get_target()
    applied: list[str] = []
    for row in rows:
        if (row.requires is not None and not row.requires(target)) \
                or not all(target.runs(op) for op in row.produces):
            continue
        if row.whole_graph is not None:
            applied += row.whole_graph(graph)
            continue
        for node in list(graph.nodes):
            if node.graph is not graph:  # removed by an earlier rewrite
                continue
            ctx = row.match(graph, node)
            if ctx is not None:
                applied.append(row.rewrite(graph, node, ctx))
    graph.fusions += applied
    return PassResult(graph, bool(applied), f"{len(applied)} fusions")
