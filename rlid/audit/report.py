"""Text, verdicts and a chart for an ``rlid audit`` report (a dict from ``rlid.audit.audit``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlid.runs.files import new_figure, save_figure

IDENTITY_TOLERANCE = 1e-9
"""Relative residual below which the identity counts as verified in float64."""


def verdicts(report: dict[str, Any]) -> dict[str, str]:
    """One sentence per finding, with the report's own numbers."""
    c1 = report["controls"]["wording_dependent_advantage"]
    c2 = report["controls"]["label_policy"]
    c3 = report["controls"]["advantage_noise"]
    holds = max(report["identity_residual_rel"], report["mean_gap_rel"]) <= IDENTITY_TOLERANCE
    return {
        "identity": (
            f"{'verified' if holds else 'NOT verified'}: tr Cov[g_y] = tr Cov[g_a] + "
            f"E_a tr Cov[g_y|a] to {report['identity_residual_rel']:.1e} (relative) and "
            f"E[g_y] = E[g_a] to {report['mean_gap_rel']:.1e}; for this policy, state and "
            f"advantages, marginalising the wordings removes "
            f"{report['variance_removed_frac']:.1%} of the token-plane tr-variance "
            "and leaves the expected update unchanged."
        ),
        "wording_dependent_advantage": (
            f"premise violated (A depends on the wording): E[g_y|a] != g_a, the means differ "
            f"by {c1['mean_gap_rel']:.2e} (relative; {report['mean_gap_rel']:.1e} when A depends "
            f"on the action only) and the decomposition is off by "
            f"{c1['identity_residual_rel']:.1e}; the decision estimator is then biased for "
            "the token-plane gradient and the identity does not apply. The bias is as large as "
            "the policy's spread over each action's wordings lets it be."
        ),
        "label_policy": (
            f"the identity says nothing here: the label readout is another function of the "
            f"same weights (total variation {c2['total_variation']:.3f} from the text "
            f"marginal, mean-gradient cosine {c2['mean_cosine_with_marginal']:+.2f}); its "
            f"tr-variance {c2['trace_cov']:.3g} vs the marginal's "
            f"{c2['trace_cov_text_marginal']:.3g} compares two policies, and 'a separately "
            "trained label model is better' does not follow."
        ),
        "advantage_noise": (
            f"not removed by marginalising: noise of variance {c3['sigma'] ** 2:.3g} adds "
            f"{c3['extra_text']:.4g} to the token plane (analytic sigma^2 E|grad log pi(y)|^2 "
            f"= {c3['analytic_extra_text']:.4g}) and {c3['extra_action']:.4g} to the decision "
            f"plane (analytic sigma^2 E|grad log pi(a)|^2 = {c3['analytic_extra_action']:.4g}); "
            f"marginalising removes only the {c3['noise_removed_by_marginalising']:.4g} "
            "that rides on the wording term."
        ),
    }


def format_report(report: dict[str, Any]) -> str:
    """The human table printed by ``rlid audit``."""
    m, s, tp = report["model"], report["state"], report["text_policy"]
    lines = [
        "rlid audit: the marginalization variance identity, exact enumeration in float64",
        f"model   {m['name']} ({m['origin']}, {m['architecture']}); gradient over "
        f"{m['audited_parameters']:,} of {m['num_parameters']:,} parameters "
        f"(globs {' '.join(m['param_globs'])})",
        f"state   {s['name']}: Goal: {s['objective']} | Now: {s['observation']}",
        f"text    pi~(y|s): the model's probability of {s['completion']} after "
        "'Command:', renormalised over the enumerated wordings "
        f"(which hold {tp['enumerated_mass']:.2e} of its mass)",
        "",
        f"{'action / wording':<36}{'A':>7}{'pi~':>9}{'tokens':>8}{'E-term':>11}",
    ]
    for action in tp["actions"]:
        lines.append(
            f"{action['action']:<36}{action['advantage']:>7.2f}{action['prob']:>9.4f}"
            f"{'':>8}{action['wording_term']:>11.4g}"
        )
        for w in tp["wordings"]:
            if w["action"] == action["action"]:
                lines.append(f"    {w['wording']:<32}{'':>7}{w['prob']:>9.4f}{w['num_tokens']:>8}")
    lines += [
        "",
        f"{'tr Cov[g_y]        token-plane estimator':<56}{report['trace_cov_text']:.6e}",
        f"{'tr Cov[g_a]        decision estimator':<56}{report['trace_cov_action']:.6e}",
        f"{'E_a tr Cov[g_y|a]  wording term':<56}{report['wording_term']:.6e}",
        f"{'identity residual  |y - a - wording| / y':<56}{report['identity_residual_rel']:.2e}",
        f"{'mean gap           |E g_y - E g_a| / |E g_y|':<56}{report['mean_gap_rel']:.2e}",
        f"{'score check        |E grad log pi~(y)| / rms, exactly 0':<56}"
        f"{report['score_mean_rel']:.2e}",
        "",
        f"Monte Carlo: n wordings y ~ pi~, both estimators on the same draws; "
        f"bootstrap {report['monte_carlo']['level']:.0%} intervals ({report['monte_carlo']['n_boot']} "
        "resamples); * = interval misses the exact value",
        f"{'n':>6}  {'tr Cov[g_y]':^30}  {'tr Cov[g_a]':^30}  {'difference (wording term)':^30}",
    ]
    for row in report["monte_carlo"]["rows"]:
        cells = [_mc_cell(row[k]) for k in ("trace_cov_text", "trace_cov_action", "difference")]
        lines.append(f"{row['n']:>6}  " + "  ".join(f"{c:<30}" for c in cells))
    lines.append(
        f"{'exact':>6}  {report['trace_cov_text']:<30.4g}  {report['trace_cov_action']:<30.4g}  "
        f"{report['wording_term']:<30.4g}"
    )
    c1 = report["controls"]["wording_dependent_advantage"]
    c2 = report["controls"]["label_policy"]
    c3 = report["controls"]["advantage_noise"]
    lines += [
        "",
        "Negative controls",
        f"1. wording-dependent advantage ({c1['bonus']:+} on each canonical wording, centred "
        "within its action): "
        f"mean gap {c1['mean_gap_rel']:.3f}, residual {c1['identity_residual_rel']:.2e}",
        f"2. label readout of the same weights ('Answer:' menu): label mass "
        f"{c2['label_mass']:.3f}, tr Cov {c2['trace_cov']:.4g}",
    ]
    lines += [
        f"     {a:<32} pi_label {p:.4f}   pi~(a) {c2['text_marginal'][a]:.4f}"
        for a, p in c2["probs"].items()
    ]
    lines += [
        f"3. advantage noise sigma={c3['sigma']}: extra tr-variance text "
        f"{c3['extra_text']:.6g} (analytic {c3['analytic_extra_text']:.6g}), decision "
        f"{c3['extra_action']:.6g} (analytic {c3['analytic_extra_action']:.6g})",
        "",
        "Verdicts",
    ]
    lines += [f"- {name}: {text}" for name, text in report["verdicts"].items()]
    if "seconds" in report:
        lines += ["", f"({report['seconds']:.1f} s)"]
    return "\n".join(lines)


def _mc_cell(entry: dict[str, Any]) -> str:
    low, high = entry["ci"]
    miss = "" if entry["covers_exact"] else "*"
    return f"{entry['estimate']:.4g} [{low:.3g}, {high:.3g}]{miss}"


def write_plot(report: dict[str, Any], path: Path) -> Path:
    """Bar chart of the variance terms and the Monte-Carlo estimates, written atomically.

    Uses matplotlib's object API (no pyplot, no global backend).
    """
    c2 = report["controls"]["label_policy"]
    c3 = report["controls"]["advantage_noise"]
    action, wording = report["trace_cov_action"], report["wording_term"]
    fig = new_figure(figsize=(15, 4.4))
    ax, other, mc = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1.4, 0.7, 1.2]})
    # Stacks: token = action + wording; token + noise = action + wording + sigma^2 E|s_y|^2;
    # decision + noise = action + sigma^2 E|s_a|^2.
    names = ["token plane", "decision", "token + noise", "decision + noise"]
    ax.bar(names, [action] * 4, color="tab:blue", label="tr Cov[g_a]")
    ax.bar(
        names[0:3:2], [wording] * 2, bottom=[action] * 2, color="tab:orange", label="wording term"
    )
    ax.bar(
        names[2:4],
        [c3["extra_text"], c3["extra_action"]],
        bottom=[action + wording, action],
        color="tab:red",
        label=f"advantage noise (sigma={c3['sigma']})",
    )
    ax.set_ylabel("trace of covariance")
    ax.set_title("one text policy: the identity (exact)")
    ax.tick_params(axis="x", labelrotation=15)
    ax.legend(fontsize=8)
    # The label policy is another model: its own panel and scale, no stacking.
    other.bar(["marginal pi~(a)", "label readout"], [action, c2["trace_cov"]], color="tab:gray")
    other.set_title("two policies: outside the identity", fontsize=10)
    other.tick_params(axis="x", labelrotation=15)

    rows = report["monte_carlo"]["rows"]
    sizes = [r["n"] for r in rows]
    for key, color, label, shift in (
        ("trace_cov_text", "tab:orange", "tr Cov[g_y]", 0.92),
        ("trace_cov_action", "tab:blue", "tr Cov[g_a]", 1.08),
    ):
        est = [r[key]["estimate"] for r in rows]
        low = [r[key]["estimate"] - r[key]["ci"][0] for r in rows]
        high = [r[key]["ci"][1] - r[key]["estimate"] for r in rows]
        x = [n * shift for n in sizes]  # side by side, not on top of each other
        mc.errorbar(x, est, yerr=[low, high], fmt="o", color=color, capsize=3, label=label)
        mc.axhline(rows[0][key]["exact"], color=color, linestyle="--", linewidth=1)
    mc.set_xscale("log", base=2)
    mc.set_xlabel("n sampled wordings")
    mc.set_title("Monte Carlo, bootstrap 95% intervals (dashed: exact)")
    mc.legend(fontsize=8)
    fig.tight_layout()

    return save_figure(fig, path, dpi=110)
