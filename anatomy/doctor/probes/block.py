"""Block probes: the wiring of the learner's block. Which norm is called how often (one norm for two sub-layers),
what is left of the input when both sub-layers are silenced (no residual), whether the block ends in a norm and
what its first norm sees (post-norm, pre-norm, or a norm on the residual path), how wide the FFN is."""

from __future__ import annotations

import torch

from anatomy.doctor.contract.masks import close, max_diff
from anatomy.doctor.contract.precision import tol
from anatomy.doctor.loading.subject import CallError
from anatomy.doctor.probes.state import Probe, ProbeResult, ProbeState
from anatomy.doctor.report.findings import Finding
from anatomy.doctor.report.words import fmt

# --- blocks -------------------------------------------------------------------------------------------------------


def norm_parameters(state: ProbeState) -> ProbeResult:
    parts = state.parts
    if parts is None or not parts.norms:
        return [], (
            "no norm module found (nn.LayerNorm, nn.RMSNorm or a class named *Norm)",
            "没有找到 norm 模块（nn.LayerNorm、nn.RMSNorm 或名为 *Norm 的类）",
        )
    named = dict(state.subject.module.named_modules())
    counts = {p: parts.norm_calls.count(p) for p in parts.norms}
    # a norm without parameters has nothing to share (F.layer_norm in a module, used twice), and one norm called on
    # a sub-layer's query and its key/value inputs serves one sub-layer: shared means calls in two sub-layers
    shared = [p for p, n in counts.items() if n > 1 and _owns_parameters(named[p]) and _serves_two(state, p)]
    params = [
        (p, id(getattr(named[p], "weight", None)))
        for p in parts.norms
        if isinstance(getattr(named[p], "weight", None), torch.Tensor)
    ]
    same_param = len({i for _, i in params}) < len(params)
    if shared or same_param:
        who = shared[0] if shared else params[0][0]
        n = counts.get(who, 0)
        return [
            Finding(
                "norm_parameters",
                "error",
                f"one norm `{who}` serves {n if shared else 'several'} sub-layers (called {n}× in one forward; "
                f"{len(parts.norms)} norm module(s) for 2 sub-layers): each needs its own gamma and beta",
                f"同一个 norm `{who}` 被 {n if shared else '多'} 个子层共用（一次 forward 调用 {n} 次；"
                f"2 个子层只有 {len(parts.norms)} 个 norm 模块）：每个子层都需要自己的 gamma 和 beta",
                {"norm": who, "calls": n, "norm_modules": len(parts.norms), "sub_layers": 2},
                fault="shared_layernorm",
            )
        ], None
    return [], None


def _owns_parameters(m: torch.nn.Module) -> bool:
    return any(True for _ in m.parameters())


def _serves_two(state: ProbeState, norm: str) -> bool:
    """Do the calls of ``norm`` fall in two sub-layers? The forward's finishing order splits into: up to the
    attention's end, up to the feed-forward's last projection, after it (pre-norm calls sit in the first two,
    post-norm calls in the last two). Without the attention or the feed-forward found, two calls say it."""
    order, parts = state.call_order, state.parts
    down = parts.ffn.get("down") if parts is not None else None
    if not state.attn_scope or state.attn_scope not in order or down is None or down not in order:
        return True
    attn_end = order.index(state.attn_scope)
    ffn_end = next((i for i, p in enumerate(order) if p == down and i > attn_end), len(order))
    regions = {0 if i <= attn_end else 1 if i <= ffn_end else 2 for i, p in enumerate(order) if p == norm}
    return len(regions) > 1


def _zeroed(state: ProbeState) -> list[str]:
    """Learner parameters that make the attention and FFN outputs 0 when zeroed (their last projections)."""
    if state.hyp is None:
        return []
    names = []
    for ref in ("attn.o_proj.weight", "attn.o_proj.bias", "ffn.down_proj.weight", "ffn.down_proj.bias"):
        src = state.hyp.sources.get(ref)
        if src is not None:
            names.append(src.user)
    return names if any("o_proj.weight" in r for r in state.hyp.sources) else []


def residual(state: ProbeState) -> ProbeResult:
    names, hyp = _zeroed(state), state.hyp
    if not names or hyp is None or not any("down_proj" in r for r in hyp.sources):  # names: hyp is set
        return [], ("the attention output and FFN projections were not mapped", "未能对应注意力输出投影和 FFN 投影")
    params = dict(state.subject.module.named_parameters())
    saved = {n: params[n].detach().clone() for n in names}
    try:
        with torch.no_grad():
            for n in names:
                params[n].zero_()
        out, _ = state.subject.run(state.x)
    except CallError as err:
        return [], (str(err), str(err))
    finally:
        with torch.no_grad():
            for n, v in saved.items():
                params[n].copy_(v)
    spread = float(out.std(dim=1).max())  # does anything of x survive?
    ev = {"silenced_output_std_over_tokens": spread, "max_diff_from_input": max_diff(out, state.x)}
    if close(out, state.x):
        state.silenced = "identity"
    elif spread <= tol(1e-9) * state.scale:
        state.silenced = "constant"
        return [
            Finding(
                "residual",
                "error",
                "with the attention and FFN outputs set to 0 the block's output no longer depends on its input "
                f"(std over tokens {fmt(spread)}): there is no residual path x + f(x)",
                f"把注意力和 FFN 的输出置 0 后，block 的输出不再依赖输入（各 token 间标准差 {fmt(spread)}）："
                "没有 x + f(x) 的残差路径",
                ev,
                fault="no_residual",
            )
        ], None
    else:
        state.silenced = "normed"
    return [], None


def unused_norms(state: ProbeState, called: list[str], out: torch.Tensor) -> list[str]:
    """The norms that run but whose output reaches nothing: noise added to every output of one leaves the block's
    output as it was (PaLM-pytorch before 49232e1 projected q, k, v from x and normalised x only afterwards)."""
    named = dict(state.subject.module.named_modules())
    gen = torch.Generator().manual_seed(0)
    dead = []
    for p in called:

        def noisy(_m: torch.nn.Module, _a: object, o: object) -> object:
            if not isinstance(o, torch.Tensor) or not o.is_floating_point():
                return o
            noise = torch.randn(o.shape, generator=gen, dtype=o.dtype)
            return o + noise.to(o.device) * (1 + float(o.detach().abs().max()))

        handle = named[p].register_forward_hook(noisy)
        try:
            moved, _ = state.subject.run(state.x)
        except CallError:
            continue
        finally:
            handle.remove()
        if isinstance(moved, torch.Tensor) and moved.shape == out.shape and bool(torch.equal(moved, out)):
            dead.append(p)
    return dead


def unused_norm_finding(dead: list[str]) -> Finding:
    names = ", ".join(f"`{p}`" for p in dead)
    return Finding(
        "norm_placement",
        "error",
        f"{names} runs but its output is never used: noise added to it leaves the block's output unchanged, so "
        "the sub-layer reads the un-normalised x (for Pre-Norm, project q, k, v from norm(x), not from x)",
        f"{names} 被调用了，但它的输出没有被使用：给它的输出加噪声后 block 的输出不变，说明子层读的是未归一化的 x"
        "（Pre-Norm 应由 norm(x) 计算 q、k、v，而不是由 x）",
        {"unused_norms": dead},
    )


def norm_placement(state: ProbeState) -> ProbeResult:
    parts = state.parts
    if parts is None or not parts.norms:
        return [], ("no norm module found", "没有找到 norm 模块")
    named = dict(state.subject.module.named_modules())
    calls: list[tuple[str, torch.Tensor | None, torch.Tensor]] = []
    handles = [
        named[p].register_forward_hook(
            lambda m, a, o, p=p: calls.append(
                (p, state.subject.batch_first(a[0]) if a else None, state.subject.batch_first(o))
            )
        )
        for p in parts.norms
    ]
    try:
        out, _ = state.subject.run(state.x)
    except CallError as err:
        return [], (str(err), str(err))
    finally:
        for hd in handles:
            hd.remove()
    if not calls:
        return [], ("no norm was called", "没有 norm 被调用")
    dead = unused_norms(state, sorted({c[0] for c in calls}), out)
    if dead:
        state.found_block["placement"] = "unknown"
        return [unused_norm_finding(dead)], None
    first_in_is_x = calls[0][1] is not None and close(calls[0][1], state.x)
    ends_with_norm = isinstance(calls[-1][2], torch.Tensor) and close(out, calls[-1][2])
    ev = {
        "first_norm_input_is_x": first_in_is_x,
        "output_is_last_norm_output": ends_with_norm,
        "norm_calls": [c[0] for c in calls],
        "silenced_block": state.silenced,
    }
    if ends_with_norm and not first_in_is_x:
        placement = "post"
    elif first_in_is_x and ends_with_norm:
        placement = "pre+final"
    elif first_in_is_x and state.silenced in ("identity", "constant", None):
        placement = "pre"
    elif first_in_is_x and state.silenced == "normed":
        placement = "norm_on_residual_path"
    else:
        placement = "unknown"
    state.found_block["placement"] = placement
    if placement == "norm_on_residual_path":
        return [
            Finding(
                "norm_placement",
                "error",
                "the first norm sees x (Pre-Norm), but with both sub-layers silenced the block returns "
                "norm(norm(x)) instead of x: the residual carries the normalised input",
                "第一个 norm 的输入是 x（Pre-Norm），但把两个子层都静音后 block 返回的是 norm(norm(x)) 而不是 "
                "x：残差走的是归一化之后的输入",
                ev,
                fault="norm_on_residual_path",
            )
        ], None
    return [], None


def ffn_width(state: ProbeState) -> ProbeResult:
    parts = state.parts
    if parts is None or not parts.d_ff:
        return [], ("no feed-forward pair of Linears (D → F → D) found", "没有找到前馈网络的两个 Linear（D → F → D）")
    ratio = parts.d_ff / state.d
    if not 2 <= ratio <= 8:
        return [
            Finding(
                "ffn_width",
                "warning",
                f"d_ff = {parts.d_ff} = {fmt(ratio)} × d_model; the usual width is 4 × d_model (8/3 × for "
                "gated FFNs): the FFN holds most of a block's capacity",
                f"d_ff = {parts.d_ff} = {fmt(ratio)} × d_model；通常取 4 × d_model（门控 FFN 取 8/3 ×）："
                "FFN 承载了 block 的大部分容量",
                {"d_ff": parts.d_ff, "ratio": ratio},
            )
        ], None
    return [], None


BLOCK_PROBES: dict[str, Probe] = {
    "norm_parameters": norm_parameters,
    "residual": residual,
    "norm_placement": norm_placement,
    "ffn_width": ffn_width,
}
