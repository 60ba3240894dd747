#!/usr/bin/python3
"""train_plot.py — draws a training curve as a self-contained SVG (matplotlib is not
installed here), two panels against the step:
  - train_log.tsv written by `attnscope pretrain` (step, loss, mlm_acc, lr, ...): masked-LM
    loss and masked-token accuracy;
  - the progress lines of `attnscope train-lm` ("step N/TOTAL  loss X  grad norm G  lr R
    ...  T tokens/s", as its stdout / a tee'd log has them; other lines skipped):
    next-token loss and the learning rate.

Usage: /usr/bin/python3 bench/train_plot.py LOG OUT.svg [TITLE]
"""
import re
import sys

LM_LINE = re.compile(r"^step (\d+)/\d+\s+loss ([0-9.eE+-]+)\s+grad norm ([0-9.eE+-]+)\s+lr ([0-9.eE+-]+)")


def read_lm(lines):
    """Rows {step, loss, grad_norm, lr} of train-lm progress lines (a resumed run may
    repeat steps: the last line of a step wins)."""
    by_step = {}
    for line in lines:
        m = LM_LINE.match(line)
        if m:
            by_step[int(m.group(1))] = {"step": float(m.group(1)), "loss": float(m.group(2)),
                                        "grad_norm": float(m.group(3)), "lr": float(m.group(4))}
    return [by_step[k] for k in sorted(by_step)]


def read(path):
    rows = []
    with open(path) as f:
        lines = f.readlines()
    if not lines or not lines[0].startswith("step\t"):
        return read_lm(lines)
    head = lines[0].rstrip("\n").split("\t")
    for line in lines[1:]:
        v = line.rstrip("\n").split("\t")
        if len(v) == len(head):
            rows.append({k: float(x) for k, x in zip(head, v)})
    return rows


def panel(x0, y0, w, h, xs, ys, color, label, xmax, ylo, yhi, nt=5):
    out = [f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" stroke="#999"/>']
    sx = lambda v: x0 + w * v / xmax
    sy = lambda v: y0 + h - h * (v - ylo) / (yhi - ylo)
    for i in range(nt + 1):
        yv = ylo + (yhi - ylo) * i / nt
        out.append(f'<line x1="{x0}" x2="{x0 + w}" y1="{sy(yv):.1f}" y2="{sy(yv):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{x0 - 6}" y="{sy(yv) + 4:.1f}" text-anchor="end" font-size="11">{yv:.2f}</text>')
        xv = xmax * i / nt
        out.append(f'<text x="{sx(xv):.1f}" y="{y0 + h + 15}" text-anchor="middle" font-size="11">{xv:.0f}</text>')
    pts = " ".join(f"{sx(a):.1f},{sy(b):.1f}" for a, b in zip(xs, ys))
    out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="1.5"/>')
    out.append(f'<text x="{x0 + 8}" y="{y0 + 16}" font-size="13" fill="{color}">{label}</text>')
    return out


def main():
    rows = read(sys.argv[1])
    if not rows:
        sys.exit(f"{sys.argv[1]}: no training log rows (train_log.tsv or train-lm progress lines)")
    lm = "mlm_acc" not in rows[0]
    title = sys.argv[3] if len(sys.argv) > 3 else "attnscope " + ("train-lm" if lm else "pretraining")
    xs = [r["step"] for r in rows]
    loss = [r["loss"] for r in rows]
    acc = [r["lr"] if lm else r["mlm_acc"] for r in rows]
    xmax = max(xs)
    W, H = 720, 520
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">{title}</text>']
    lo, hi = min(loss), max(loss)
    loss_label = "next-token loss (train batch, nats)" if lm else "masked-LM loss (train, mean over 20 steps)"
    svg += panel(70, 40, 620, 190, xs, loss, "#c0392b", loss_label, xmax, lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
    if lm:
        svg += panel(70, 290, 620, 190, xs, [v * 1e3 for v in acc], "#2471a3", "learning rate (x 1e-3)", xmax, 0.0,
                     max(acc) * 1e3 * 1.1 + 1e-6)
    else:
        svg += panel(70, 290, 620, 190, xs, acc, "#2471a3", "masked-token accuracy (train)", xmax, 0.0,
                     max(acc) * 1.1 + 1e-3)
    svg.append(f'<text x="{70 + 310}" y="{H - 8}" text-anchor="middle" font-size="12">step</text>')
    svg.append("</svg>")
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
