// rope.ts — how much of a rotary model's attention score comes from position. RoPE (Su
// et al. 2021, RoFormer, sec. 3.4) rotates q and k by angles proportional to their
// positions before q·k, so q_i·k_j depends on i − j. For a query i and each key j:
//   s_pre(j) = q_pre_i · k_pre_j · scale   content only: the vectors before the rotation
//   s(j)     = q_i · k_j · scale           the score as computed (after the rotation)
//   Δ(j)     = s(j) − s_pre(j)             what the rotation (position) adds or removes
// and, over the keys the query may see, position's share of the score's magnitude
//   share = Σ|Δ(j)| / (Σ|s_pre(j)| + Σ|Δ(j)|).
// The engine's captured score is s(j) plus the mask (and, for Gemma 2, after the soft-cap
// c·tanh(s/c)); docs/views.md "Neuron view: RoPE".

export interface RopeInput {
  T: number;
  Dh: number;
  q: Float32Array; // (T, Dh) after RoPE
  k: Float32Array; // (T, Dh) after RoPE
  qPre: Float32Array; // (T, Dh) before RoPE
  kPre: Float32Array; // (T, Dh) before RoPE
  scale: number;
}

export interface RopeDecomposition {
  query: number;
  sPre: Float64Array; // (T) content: q_pre · k_pre · scale
  s: Float64Array; // (T) with the rotation: q · k · scale
  delta: Float64Array; // (T) s − s_pre
  /** Σ|Δ| / (Σ|s_pre| + Σ|Δ|) over the keys not masked; 0 when both sums are 0 */
  share: number;
}

/** v with d decimals and its sign, "+0.000" for values that round to zero (never "-0.000"). */
export function signed(v: number, d: number): string {
  const r = Math.abs(v) < 0.5 * 10 ** -d ? 0 : v;
  return `${r >= 0 ? '+' : ''}${r.toFixed(d)}`;
}

function dot(a: Float32Array, i: number, b: Float32Array, j: number, Dh: number): number {
  let s = 0;
  for (let x = 0; x < Dh; x++) s += a[i * Dh + x] * b[j * Dh + x];
  return s;
}

/** The decomposition of query i's scores; masked(j) says which keys it may not see. */
export function ropeDecomposition(d: RopeInput, i: number, masked: (j: number) => boolean): RopeDecomposition {
  const sPre = new Float64Array(d.T);
  const s = new Float64Array(d.T);
  const delta = new Float64Array(d.T);
  let content = 0;
  let position = 0;
  for (let j = 0; j < d.T; j++) {
    sPre[j] = dot(d.qPre, i, d.kPre, j, d.Dh) * d.scale;
    s[j] = dot(d.q, i, d.k, j, d.Dh) * d.scale;
    delta[j] = s[j] - sPre[j];
    if (masked(j)) continue;
    content += Math.abs(sPre[j]);
    position += Math.abs(delta[j]);
  }
  const tot = content + position;
  return { query: i, sPre, s, delta, share: tot > 0 ? position / tot : 0 };
}
