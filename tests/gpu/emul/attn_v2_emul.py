#!/usr/bin/env python3
"""Host-side emulation of the v2 attention kernel's fragment layouts
(common/backend/cuda/k_attention.cu, AttnSplitV2Kernel + AttnCombineV2Kernel).

Registers are built with the kernel's own index formulas; mma.sync
m16n8k16 (row.col, f16 x f16 -> f32) and ldmatrix.x4.trans are applied
through the PTX ISA fragment definitions (decode the 32 lanes' registers to
the A / B / C matrices, multiply in float64, re-encode). Compared against a
float64 softmax attention over the dequantized KV.  Run: python3 attn_v2_emul.py
"""
import numpy as np

f16 = np.float16


def split_hilo(x):
    x = np.float32(x)
    hi = f16(x)
    lo = f16(np.float32(x - np.float32(hi)))
    return hi, lo


# ---- PTX fragment definitions (lane = 4*g + t) ----
def a_decode(regs):  # regs[lane][4] of (lo_half, hi_half) -> A 16x16
    A = np.zeros((16, 16))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for r in range(4):
            for e in range(2):
                i = 2 * r + e  # element index a0..a7
                row = g if (i < 2 or 4 <= i < 6) else g + 8
                col = t * 2 + (i & 1) if i < 4 else t * 2 + 8 + (i & 1)
                A[row, col] = regs[lane][r][e]
    return A


def b_decode(regs):  # regs[lane][2] pairs -> B 16x8 (k x n)
    B = np.zeros((16, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for r in range(2):
            for e in range(2):
                i = 2 * r + e
                row = t * 2 + (i & 1) if i < 2 else t * 2 + 8 + (i & 1)
                B[row, g] = regs[lane][r][e]
    return B


def c_encode(C):  # 16x8 -> per lane c0..c3
    out = np.zeros((32, 4))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for i in range(4):
            row = g if i < 2 else g + 8
            col = t * 2 + (i & 1)
            out[lane, i] = C[row, col]
    return out


def mma(acc, a_regs, b_regs):  # acc[32][4] (float32) += A*B
    A = a_decode(a_regs)
    B = b_decode(b_regs)
    C = c_encode(A @ B)
    return (acc.astype(np.float64) + C).astype(np.float32)


def ldmatrix_x4_trans(smem, addr_of_lane):
    """smem: 2-D half array [row][col]; addr_of_lane(lane) -> (row, col0) of the
    8-element row that lane supplies (lanes 8i..8i+7 -> matrix i rows 0..7).
    Returns regs[lane][4] pairs: .trans gives lane (g, t) elements
    [row 2t][col g], [row 2t+1][col g] of each matrix."""
    mats = []
    for i in range(4):
        M = np.zeros((8, 8), dtype=np.float16)
        for r in range(8):
            row, c0 = addr_of_lane(8 * i + r)
            M[r] = smem[row, c0:c0 + 8]
        mats.append(M)
    regs = [[None] * 4 for _ in range(32)]
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for i in range(4):
            regs[lane][i] = (mats[i][2 * t, g], mats[i][2 * t + 1, g])
    return regs


def warp_chunk(HD, q_rows, pos_rows, jc, maxpos, Kf, Vf, scale, q8=None):
    """One warp of AttnSplitV2Kernel: chunk [jc, jc+32). q_rows: 16 x HD float32
    (zero rows beyond R); pos_rows: 16 positions (-1: padding row). Kf/Vf:
    function j -> dequantized row (float32) or, for q8, (quants int8, scales).
    Returns per-lane o[NT][4], m0, l0, m1, l1 (the kernel's registers)."""
    KS, NT, NB = HD // 16, HD // 8, HD // 32
    # smem K / V (and V lo, K scales for Q8_0), rows beyond maxpos zero
    Ks = np.zeros((32, HD), dtype=np.float16)
    Vs = np.zeros((32, HD), dtype=np.float16)
    Vl = np.zeros((32, HD), dtype=np.float16)
    Ksc = np.zeros((32, NB), dtype=np.float32)
    for j in range(32):
        if jc + j <= maxpos:
            if q8 is None:
                Ks[j] = Kf(jc + j).astype(np.float16)
                Vs[j] = Vf(jc + j).astype(np.float16)
            else:
                kq, ksc = Kf(jc + j)
                vq, vsc = Vf(jc + j)
                Ks[j] = kq.astype(np.float16)
                Ksc[j] = ksc
                v = (vq.astype(np.float32) * np.repeat(vsc, 32)).astype(np.float32)
                for d in range(HD):
                    Vs[j, d], Vl[j, d] = split_hilo(v[d])
    # Q fragments exactly as step 2 of the kernel
    Qf = np.zeros((KS, 32, 8, 2), dtype=np.float16)
    for e in range(KS * 32 * 4):
        ks, ln, reg = e >> 7, (e >> 2) & 31, e & 3
        r = (ln >> 2) + (reg & 1) * 8
        d = ks * 16 + 2 * (ln & 3) + (reg >> 1) * 8
        x0, x1 = q_rows[r, d], q_rows[r, d + 1]
        h0, l0 = split_hilo(x0)
        h1, l1 = split_hilo(x1)
        Qf[ks, ln, reg] = (h0, h1)
        Qf[ks, ln, 4 + reg] = (l0, l1)

    def kfrag(nt, ks):  # lane (g,t): b0 = Ks[nt*8+g][ks*16+2t .. +1], b1 = +8
        regs = []
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            row = Ks[nt * 8 + g]
            c = ks * 16 + 2 * t
            regs.append([(row[c], row[c + 1]), (row[c + 8], row[c + 9])])
        return regs

    qh = lambda ks: [[tuple(Qf[ks, ln, r]) for r in range(4)] for ln in range(32)]
    ql = lambda ks: [[tuple(Qf[ks, ln, 4 + r]) for r in range(4)] for ln in range(32)]
    s = np.zeros((4, 32, 4), dtype=np.float32)
    if q8 is None:
        for ks in range(KS):
            for nt in range(4):
                b = kfrag(nt, ks)
                s[nt] = mma(s[nt], qh(ks), b)
                s[nt] = mma(s[nt], ql(ks), b)
    else:
        for bb in range(NB):
            c = np.zeros((4, 32, 4), dtype=np.float32)
            for kk in range(2):
                ks = 2 * bb + kk
                for nt in range(4):
                    b = kfrag(nt, ks)
                    c[nt] = mma(c[nt], qh(ks), b)
                    c[nt] = mma(c[nt], ql(ks), b)
            for nt in range(4):
                for lane in range(32):
                    t = lane & 3
                    sc0, sc1 = Ksc[nt * 8 + 2 * t, bb], Ksc[nt * 8 + 2 * t + 1, bb]
                    for i, sc in ((0, sc0), (1, sc1), (2, sc0), (3, sc1)):
                        s[nt, lane, i] = np.float32(c[nt, lane, i] * sc + s[nt, lane, i])
    # scale, mask, softmax state
    m0 = np.zeros(32, np.float32); m1 = np.zeros(32, np.float32)
    l0 = np.zeros(32, np.float32); l1 = np.zeros(32, np.float32)
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        pg, pg8 = pos_rows[g], pos_rows[g + 8]
        for nt in range(4):
            for e in range(2):
                j = jc + nt * 8 + 2 * t + e
                s[nt, lane, e] = -np.inf if j > pg else np.float32(s[nt, lane, e] * np.float32(scale))
                s[nt, lane, 2 + e] = -np.inf if j > pg8 else np.float32(s[nt, lane, 2 + e] * np.float32(scale))
    for lane in range(32):
        quad = [4 * (lane >> 2) + i for i in range(4)]
        mx0 = max(s[nt, ln, e] for ln in quad for nt in range(4) for e in range(2))
        mx1 = max(s[nt, ln, 2 + e] for ln in quad for nt in range(4) for e in range(2))
        m0[lane], m1[lane] = mx0, mx1
    p = np.zeros_like(s)
    for lane in range(32):
        for nt in range(4):
            for e in range(2):
                p[nt, lane, e] = 0 if s[nt, lane, e] == -np.inf else np.exp(np.float32(s[nt, lane, e] - m0[lane]))
                p[nt, lane, 2 + e] = 0 if s[nt, lane, 2 + e] == -np.inf else np.exp(np.float32(s[nt, lane, 2 + e] - m1[lane]))
    for lane in range(32):
        quad = [4 * (lane >> 2) + i for i in range(4)]
        l0[lane] = sum(p[nt, ln, e] for ln in quad for nt in range(4) for e in range(2))
        l1[lane] = sum(p[nt, ln, 2 + e] for ln in quad for nt in range(4) for e in range(2))
    # P fragments: A of k-step kk from n-tiles 2kk, 2kk+1
    ph, plo = [], []
    for kk in range(2):
        H, L = [], []
        for lane in range(32):
            hr, lr = [], []
            for (nt, i0) in ((2 * kk, 0), (2 * kk, 2), (2 * kk + 1, 0), (2 * kk + 1, 2)):
                h0, x0 = split_hilo(p[nt, lane, i0])
                h1, x1 = split_hilo(p[nt, lane, i0 + 1])
                hr.append((h0, h1)); lr.append((x0, x1))
            H.append(hr); L.append(lr)
        ph.append(H); plo.append(L)
    o = np.zeros((NT, 32, 4), dtype=np.float32)
    for kk in range(2):
        for dn in range(HD // 16):
            def addr(lane):
                mi, mr = lane >> 3, lane & 7
                return kk * 16 + mr + (mi & 1) * 8, dn * 16 + (mi >> 1) * 8
            regs = ldmatrix_x4_trans(Vs, addr)
            b01 = [[regs[l][0], regs[l][1]] for l in range(32)]
            b23 = [[regs[l][2], regs[l][3]] for l in range(32)]
            o[2 * dn] = mma(o[2 * dn], ph[kk], b01)
            o[2 * dn] = mma(o[2 * dn], plo[kk], b01)
            o[2 * dn + 1] = mma(o[2 * dn + 1], ph[kk], b23)
            o[2 * dn + 1] = mma(o[2 * dn + 1], plo[kk], b23)
            if q8 is not None:
                regs = ldmatrix_x4_trans(Vl, addr)
                c01 = [[regs[l][0], regs[l][1]] for l in range(32)]
                c23 = [[regs[l][2], regs[l][3]] for l in range(32)]
                o[2 * dn] = mma(o[2 * dn], ph[kk], c01)
                o[2 * dn + 1] = mma(o[2 * dn + 1], ph[kk], c23)
    return o, m0, l0, m1, l1


def merge(a, b):
    o, m0, l0, m1, l1 = [x.copy() for x in a]
    ob, mb0, lb0, mb1, lb1 = b
    for lane in range(32):
        for h, (m, l, mb, lb) in enumerate(((m0, l0, mb0, lb0), (m1, l1, mb1, lb1))):
            if mb[lane] == -np.inf:
                continue
            sl = slice(2 * h, 2 * h + 2)
            if m[lane] == -np.inf:
                m[lane], l[lane] = mb[lane], lb[lane]
                o[:, lane, sl] = ob[:, lane, sl]
                continue
            mn = max(m[lane], mb[lane])
            ea, eb = np.exp(np.float32(m[lane] - mn)), np.exp(np.float32(mb[lane] - mn))
            l[lane] = l[lane] * ea + lb[lane] * eb
            o[:, lane, sl] = o[:, lane, sl] * ea + ob[:, lane, sl] * eb
            m[lane] = mn
    return o, m0, l0, m1, l1


def block(HD, nw, q_rows, pos_rows, jb, Kf, Vf, scale, q8=None):
    maxpos = max(pos_rows)
    states = []
    for w in range(nw):
        jc = jb + 32 * w
        if jc <= maxpos:
            states.append(warp_chunk(HD, q_rows, pos_rows, jc, maxpos, Kf, Vf, scale, q8))
        else:
            z = np.zeros(32, np.float32)
            states.append((np.zeros((HD // 8, 32, 4), np.float32), z - np.inf, z.copy(), z - np.inf, z.copy()))
    sp = 1
    while sp < nw:
        for w in range(0, nw, 2 * sp):
            if w + sp < nw:
                states[w] = merge(states[w], states[w + sp])
        sp *= 2
    o, m0, l0, m1, l1 = states[0]
    # per row: o[HD], m, l (warp 0's write)
    rows = {}
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for h in range(2):
            r = g + 8 * h
            ent = rows.setdefault(r, [np.zeros(HD, np.float32), 0, 0])
            for i in range(HD // 8):
                ent[0][i * 8 + 2 * t] = o[i, lane, 2 * h]
                ent[0][i * 8 + 2 * t + 1] = o[i, lane, 2 * h + 1]
            if t == 0:
                ent[1], ent[2] = (m1[lane], l1[lane]) if h else (m0[lane], l0[lane])
    return rows


def combine(parts):  # list of (o, m, l) per split, as AttnCombineV2Kernel
    M = max(p[1] for p in parts)
    w = [np.exp(np.float32(p[1] - M)) for p in parts]
    L = sum(p[2] * wi for p, wi in zip(parts, w))
    O = sum(p[0] * wi for p, wi in zip(parts, w))
    return O / L


def run(HD, group, nt_tok, pos_last, split_len=128, q8=False, seed=0):
    rng = np.random.default_rng(seed)
    nw = split_len // 32
    T = pos_last + 1
    K = rng.standard_normal((T, HD)).astype(np.float32)
    V = rng.standard_normal((T, HD)).astype(np.float32)
    if q8:
        def quant(x):
            xb = x.reshape(-1, 32)
            d = (np.abs(xb).max(1) / 127).astype(np.float16).astype(np.float32)
            qv = np.round(xb / np.where(d == 0, 1, d)[:, None]).clip(-127, 127).astype(np.int8)
            return qv.reshape(-1), d
        Kq = [quant(K[j]) for j in range(T)]
        Vq = [quant(V[j]) for j in range(T)]
        Kd = np.stack([kq.astype(np.float32) * np.repeat(d, 32) for kq, d in Kq])
        Vd = np.stack([vq.astype(np.float32) * np.repeat(d, 32) for vq, d in Vq])
        Kf, Vf = (lambda j: Kq[j]), (lambda j: Vq[j])
    else:
        Kd = K.astype(np.float16).astype(np.float32)
        Vd = V.astype(np.float16).astype(np.float32)
        Kf, Vf = (lambda j: K[j]), (lambda j: V[j])
    scale = 1.0 / np.sqrt(HD)
    toks = list(range(pos_last - nt_tok + 1, pos_last + 1))  # positions of the tile's tokens
    R = len(toks) * group
    Q = (rng.standard_normal((R, HD)) * 1.5).astype(np.float32)
    q_rows = np.zeros((16, HD), np.float32); q_rows[:R] = Q
    pos_rows = [toks[r // group] if r < R else -1 for r in range(16)]
    worst = 0.0
    outs = {}
    for r in range(R):
        parts = []
        outs[r] = None
    n_splits = pos_last // split_len + 1
    per_split = [block(HD, nw, q_rows, pos_rows, s * split_len, Kf, Vf, scale, q8 if q8 else None) for s in range(n_splits)]
    for r in range(R):
        p = pos_rows[r]
        parts = [(per_split[s][r][0], per_split[s][r][1], per_split[s][r][2]) for s in range(p // split_len + 1)]
        got = combine(parts)
        sc = (Kd[:p + 1].astype(np.float64) @ Q[r].astype(np.float64)) * scale
        w = np.exp(sc - sc.max()); w /= w.sum()
        ref = w @ Vd[:p + 1].astype(np.float64)
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        worst = max(worst, err)
        outs[r] = got
    return worst, outs, pos_rows


if __name__ == "__main__":
    ok = True
    for HD, group, ntok, pos_last, q8 in [(64, 8, 2, 140, False), (64, 4, 4, 37, False), (32, 5, 3, 70, False),
                                         (128, 8, 1, 200, False), (64, 8, 2, 140, True), (128, 8, 2, 45, True)]:
        worst, outs, pos_rows = run(HD, group, ntok, pos_last, q8=q8)
        ok &= worst < 1e-5
        print(f"HD={HD} group={group} tokens={ntok} last pos={pos_last} {'Q8_0' if q8 else 'F16'}: "
              f"max rel err vs float64 {worst:.2e}")
    print("emulation", "PASS" if ok else "FAIL")
