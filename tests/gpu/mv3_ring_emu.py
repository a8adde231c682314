#!/usr/bin/env python3
# Run with a python that has numpy (here: /usr/bin/python3 tests/gpu/mv3_ring_emu.py).
# Host emulation of the v3 ring (k_matvec.cu: IssueStage/ReadStage/ReadHdr,
# ring_issue/ring_next) against v2's LoadStage/LoadHdr, transcribed line by line.
import numpy as np, random
rng = np.random.default_rng(1)
MEM = 1 << 20
mem = rng.integers(0, 256, MEM, dtype=np.uint8)
def ld(addr, n):  # little-endian load with natural-alignment check (as the PTX needs)
    assert addr % n == 0, (addr, n)
    return int.from_bytes(mem[addr:addr + n].tobytes(), 'little')
GROUP = {'Q4_K': 144, 'Q5_K': 176, 'Q6_K': 210, 'Q8_0': 272}
RING = {'Q4_K': (8, 0, 1, 0), 'Q5_K': (12, 0, 1, 0), 'Q6_K': (0, 36, 0, 5), 'Q8_0': (12, 16, 0, 8)}
def offs(T):
    q8, q4, h16, h4 = RING[T]
    o4 = q8 * 256; oh16 = o4 + q4 * 128; oh4 = oh16 + h16 * 512; slot = oh4 + h4 * 128
    return o4, oh16, oh4, slot

def v2_load_stage(T, rp, st, t):
    r = {}
    for mt in range(2):
        for h in range(2):
            p = rp[mt][h]
            if T == 'Q4_K':
                for pp in range(2): r[('q', mt, h, pp)] = ld(p + 16 + 32 * (2 * st + pp) + 8 * t, 8)
            elif T == 'Q5_K':
                for pp in range(2): r[('q', mt, h, pp)] = ld(p + 48 + 32 * (2 * st + pp) + 8 * t, 8)
                r[('qh', mt, h)] = ld(p + 16 + 8 * t, 8)
            elif T == 'Q6_K':
                pa = (p & ~3) + 8 * t
                off = [64 * st, 64 * st + 32, 128 + 32 * st]
                for c in range(3):
                    for w in range(3): r[('w', mt, h, c, w)] = ld(pa + off[c] + 4 * w, 4)
            else:
                for j in range(4):
                    q = p + 34 * (4 * st + j) + 2 + 8 * t
                    if j == 0:
                        v = ld(q - 2, 8); r[('w', mt, h, j, 0)] = v & 0xffffffff; r[('w', mt, h, j, 1)] = v >> 32
                        r[('w', mt, h, j, 2)] = ld(q + 6, 4)
                    elif j == 1:
                        r[('w', mt, h, j, 0)] = ld(q, 4); r[('w', mt, h, j, 1)] = ld(q + 4, 4)
                    elif j == 2:
                        v = ld(q + 2, 8); r[('w', mt, h, j, 0)] = ld(q - 2, 4)
                        r[('w', mt, h, j, 1)] = v & 0xffffffff; r[('w', mt, h, j, 2)] = v >> 32
                    else:
                        v = ld(q, 8); r[('w', mt, h, j, 0)] = v & 0xffffffff; r[('w', mt, h, j, 1)] = v >> 32
    return r

def v2_load_hdr(T, p):
    if T in ('Q4_K', 'Q5_K'): return {'h': ld(p, 16)}
    if T == 'Q6_K':
        a = (p + 192) & ~3
        return {('w', i): ld(a + 4 * i, 4) for i in range(5)}
    return {('d', u): ld(p + 34 * u, 2) for u in range(8)}  # Ld16: natural alignment 2

class Smem:
    """Bytes with the (stage, lane) that wrote them: a read must see this stage's
    copy, made by the reading lane itself (per-lane rings) or by a lane of the
    same quad (coop: ordered by the __syncwarp after the wait)."""
    def __init__(self, n): self.b = np.zeros(n, dtype=np.int64) - 1; self.owner = {}; self.tag = {}
    def cp(self, dst, src, n, lane, stage):
        assert dst % n == 0 and src % n == 0, (dst, src, n)
        for i in range(n):
            key = dst + i
            assert self.tag.get(key) != stage, 'two copies of one byte in a stage'
            self.owner[key] = lane; self.tag[key] = stage
            self.b[key] = mem[src + i]
    def rd(self, addr, n, lane, stage, coop=False):
        assert addr % n == 0
        v = 0
        for i in range(n):
            assert self.tag.get(addr + i) == stage, 'read of a byte not copied for this stage'
            if coop: assert self.owner[addr + i] >> 2 == lane >> 2, 'read of another quad\'s byte'
            else: assert self.owner[addr + i] == lane, 'read of another lane\'s byte'
            v |= int(self.b[addr + i]) << (8 * i)
        return v

def issue_stage(T, sm0, slot, rp, tp, off, st, lane, t, stage, coop=False):
    class W:  # binds the stage tag
        def cp(self, dst, src, n, lane): sm0.cp(dst, src, n, lane, stage)
    sm = W()
    o4, oh16, oh4, SL = offs(T)
    q8 = slot + 8 * lane; q4 = slot + o4 + 4 * lane
    g = lane >> 2
    for mt in range(2):
        for h in range(2):
            p = rp[mt][h] + off; r = 2 * mt + h
            if coop and T == 'Q6_K':
                a = p & ~3
                bq = (a + 64 * st) & ~15; bh = (a + 128 + 32 * st) & ~15
                reg = slot + 144 * (r * 8 + g)
                sm.cp(reg + 16 * t, bq + 16 * t, 16, lane)
                if t == 0: sm.cp(reg + 64, bq + 64, 16, lane)
                else: sm.cp(reg + 16 * (t + 4), bh + 16 * (t - 1), 16, lane)
            elif coop:
                kQ = 16 if T == 'Q4_K' else 48
                pp, c = t >> 1, t & 1
                sm.cp(slot + 32 * ((2 * r + pp) * 8 + g) + 16 * c, p + kQ + 32 * (2 * st + pp) + 16 * c, 16, lane)
                if T == 'Q5_K' and (r & 1) == (t >> 1):
                    sm.cp(slot + 2048 + 32 * (r * 8 + g) + 16 * c, p + 16 + 16 * c, 16, lane)
            elif T == 'Q4_K':
                for pp in range(2): sm.cp(q8 + 256 * (2 * r + pp), p + 16 + 32 * (2 * st + pp) + 8 * t, 8, lane)
            elif T == 'Q5_K':
                for pp in range(2): sm.cp(q8 + 256 * (3 * r + pp), p + 48 + 32 * (2 * st + pp) + 8 * t, 8, lane)
                sm.cp(q8 + 256 * (3 * r + 2), p + 16 + 8 * t, 8, lane)
            elif T == 'Q6_K':
                pa = (p & ~3) + 8 * t
                offc = [64 * st, 64 * st + 32, 128 + 32 * st]
                for c in range(3):
                    for w in range(3): sm.cp(q4 + 128 * ((3 * r + c) * 3 + w), pa + offc[c] + 4 * w, 4, lane)
            else:
                for j in range(4):
                    q = p + 34 * (4 * st + j) + 2 + 8 * t
                    if j == 0:
                        sm.cp(q8 + 256 * (3 * r + 0), q - 2, 8, lane); sm.cp(q4 + 128 * (4 * r + 0), q + 6, 4, lane)
                    elif j == 1:
                        sm.cp(q4 + 128 * (4 * r + 1), q, 4, lane); sm.cp(q4 + 128 * (4 * r + 2), q + 4, 4, lane)
                    elif j == 2:
                        sm.cp(q4 + 128 * (4 * r + 3), q - 2, 4, lane); sm.cp(q8 + 256 * (3 * r + 1), q + 2, 8, lane)
                    else:
                        sm.cp(q8 + 256 * (3 * r + 2), q, 8, lane)
    if st == 0:
        hp = tp + off
        if T in ('Q4_K', 'Q5_K'): sm.cp(slot + oh16 + 16 * lane, hp, 16, lane)
        elif T == 'Q6_K':
            a = (hp + 192) & ~3
            for i in range(5): sm.cp(slot + oh4 + 128 * i + 4 * lane, a + 4 * i, 4, lane)
        else:
            for u in range(8): sm.cp(slot + oh4 + 128 * u + 4 * lane, hp + 34 * u - 2 * (u & 1), 4, lane)

def read_stage(T, sm, slot, lane, stage, coop=False, rp=None):
    o4, oh16, oh4, SL = offs(T)
    q8 = lambda i: sm.rd(slot + 8 * (32 * i + lane), 8, lane, stage, coop)
    q4 = lambda i: sm.rd(slot + o4 + 4 * (32 * i + lane), 4, lane, stage, coop)
    r = {}
    for mt in range(2):
        for h in range(2):
            rr = 2 * mt + h
            if coop and T == 'Q6_K':
                mis = rp[mt][h] & 12
                reg = slot + 144 * (rr * 8 + (lane >> 2)) + mis + 8 * (lane & 3)
                for c in range(3):
                    for w in range(3):
                        r[('w', mt, h, c, w)] = sm.rd(reg + (80 if c == 2 else 32 * c) + 4 * w, 4, lane, stage, True)
            elif coop:
                for pp in range(2): r[('q', mt, h, pp)] = q8(2 * rr + pp)
                if T == 'Q5_K': r[('qh', mt, h)] = q8(8 + rr)  # 8 B * (256 + 32 rr + lane) = piece 8 + rr
            elif T == 'Q4_K':
                for pp in range(2): r[('q', mt, h, pp)] = q8(2 * rr + pp)
            elif T == 'Q5_K':
                for pp in range(2): r[('q', mt, h, pp)] = q8(3 * rr + pp)
                r[('qh', mt, h)] = q8(3 * rr + 2)
            elif T == 'Q6_K':
                for c in range(3):
                    for w in range(3): r[('w', mt, h, c, w)] = q4((3 * rr + c) * 3 + w)
            else:
                v0, v2, v3 = q8(3 * rr), q8(3 * rr + 1), q8(3 * rr + 2)
                lo = lambda v: v & 0xffffffff; hi = lambda v: v >> 32
                r[('w', mt, h, 0, 0)], r[('w', mt, h, 0, 1)], r[('w', mt, h, 0, 2)] = lo(v0), hi(v0), q4(4 * rr)
                r[('w', mt, h, 1, 0)], r[('w', mt, h, 1, 1)] = q4(4 * rr + 1), q4(4 * rr + 2)
                r[('w', mt, h, 2, 0)], r[('w', mt, h, 2, 1)], r[('w', mt, h, 2, 2)] = q4(4 * rr + 3), lo(v2), hi(v2)
                r[('w', mt, h, 3, 0)], r[('w', mt, h, 3, 1)] = lo(v3), hi(v3)
    return r

def read_hdr(T, sm, slot, lane, stage):
    o4, oh16, oh4, SL = offs(T)
    if T in ('Q4_K', 'Q5_K'): return {'h': sm.rd(slot + oh16 + 16 * lane, 16, lane, stage)}
    if T == 'Q6_K': return {('w', i): sm.rd(slot + oh4 + 4 * (32 * i + lane), 4, lane, stage) for i in range(5)}
    out = {}
    for u in range(8):
        w = sm.rd(slot + oh4 + 4 * (32 * u + lane), 4, lane, stage)
        out[('d', u)] = (w >> 16) if (u & 1) else (w & 0xffff)
    return out

def run(T, rows, S, s0, s1, depth, base=4096, warp_row0=0, coop=False):
    """One warp; checks every stage's Raw and every group's Hdr equal v2's."""
    G = GROUP[T]; rb = G * S
    o4, oh16, oh4, SL = offs(T)
    assert SL % 16 == 0
    sm = Smem(depth * SL)
    nq = 2 * max(s1 - s0, 0)
    lanes = []
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        rp = [[base + min(warp_row0 + 16 * mt + 8 * h + g, rows - 1) * rb + s0 * G for h in range(2)] for mt in range(2)]
        tp = base + min(warp_row0 + lane, rows - 1) * rb + s0 * G
        lanes.append(dict(g=g, t=t, rp=rp, tp=tp, qi=0, sw=0, sr=0, ioff=0))
    commits = []  # per commit: list of stages issued (uniform across lanes)
    slot_content = {}  # slot -> stage issued into it last
    def ring_issue():
        staged = None
        for L in lanes:
            if L['qi'] < nq:
                issue_stage(T, sm, L['sw'] * SL, L['rp'], L['tp'], L['ioff'], L['qi'] & 1, lanes.index(L), L['t'],
                            L['qi'], coop)
                staged = (L['sw'], L['qi'])
                if L['qi'] & 1: L['ioff'] += G
                L['qi'] += 1
                L['sw'] = 0 if L['sw'] + 1 == depth else L['sw'] + 1
        if staged:
            # nothing pending may still be read from this slot: the slot's previous stage was consumed
            prev = slot_content.get(staged[0])
            assert prev is None or prev in consumed, ('overwrite before read', prev)
            slot_content[staged[0]] = staged[1]
        commits.append(staged[1] if staged else None)
    consumed = set()
    def ring_next(q, want_hdr, group):
        ring_issue()
        done = commits[:len(commits) - (depth - 1)] if depth - 1 > 0 else commits
        assert q in done, ('stage not complete at wait', q, commits, depth)
        sr = lanes[0]['sr']
        assert slot_content[sr] == q, ('slot holds another stage', sr, slot_content[sr], q)
        for li, L in enumerate(lanes):
            assert L['sr'] == sr
            r = read_stage(T, sm, sr * SL, li, q, coop, L['rp'])
            ref = v2_load_stage(T, L['rp'], q & 1, L['t'])
            assert r == ref, ('raw mismatch', T, q, li)
            if want_hdr:
                assert read_hdr(T, sm, sr * SL, li, q) == v2_load_hdr(T, L['tp']), ('hdr mismatch', T, q, li)
            L['sr'] = 0 if sr + 1 == depth else sr + 1
        consumed.add(q)
    for i in range(depth - 1): ring_issue()
    for s in range(s0, s1):
        q = 2 * (s - s0)
        ring_next(q, True, s)
        ring_next(q + 1, False, s)
        for L in lanes:
            L['rp'] = [[x + G for x in row] for row in L['rp']]
            L['tp'] += G
            L['ioff'] -= G
    assert all(L['qi'] == nq for L in lanes)
    return len(commits)

n = 0
for T in GROUP:
    for coop in ([False, True] if T in ('Q4_K', 'Q5_K', 'Q6_K') else [False]):
        for depth in range(2, 9):
            for (rows, S, s0, s1, r0) in [(40, 3, 0, 3, 0), (130, 3, 1, 3, 96), (33, 5, 2, 5, 0), (70, 1, 0, 1, 32),
                                          (40, 4, 2, 2, 0)]:
                base = 4096 + (16 if T != 'Q6_K' else random.choice([16, 32, 48]))
                run(T, rows, S, s0, s1, depth, base=base, warp_row0=r0, coop=coop)
                n += 1
# Q6_K coop regions fit: 4 rows x 8 quads x 144 B = the per-lane layout's 36 x 128 B.
assert 4 * 8 * 144 == 36 * 128
print('ring emulation OK:', n, 'cases (4 types, Q4_K/Q5_K/Q6_K per-lane and quad-cooperative copies, depths 2..8, '
      'shapes incl. odd S for Q6_K misalignment, an empty split)')

# ---- persistent blocks: one issue stream over the block's work items ----
def run_persist(T, items, depth, coop=False):
    """items: [(base, rows, S, warp_row0, s0, s1)], the block's items in order.
    Transcribes the PERSIST ring_issue / next_issue_item / geom and checks
    every stage read equals v2's loads for the item being computed."""
    G = GROUP[T]
    o4, oh16, oh4, SL = offs(T)
    sm = Smem(depth * SL)
    def geom(it, lane):
        base, rows, S, r0, s0, s1 = items[it]
        g = lane >> 2; rb = G * S
        p = [[base + min(r0 + 16 * mt + 8 * h + g, rows - 1) * rb + s0 * G for h in range(2)] for mt in range(2)]
        tq = base + min(r0 + lane, rows - 1) * rb + s0 * G
        return p, tq, 2 * max(s1 - s0, 0)
    st = [dict(iit=0, iq=0, inq=0, irp=None, itp=None, sw=0, sr=0) for _ in range(32)]
    def next_issue_item(L, lane, first):
        L['iit'] = first; L['iq'] = 0; L['inq'] = 0
        while L['iit'] < len(items):
            L['irp'], L['itp'], L['inq'] = geom(L['iit'], lane)
            if L['inq'] > 0: break
            L['iit'] += 1
    for lane in range(32): next_issue_item(st[lane], lane, 0)
    issued = []  # per commit: (item, stage) or None
    slot_of = {}
    consumed = set()
    def ring_issue():
        tag = None
        for lane, L in enumerate(st):
            if L['iit'] < len(items):
                key = (L['iit'], L['iq'])
                issue_stage(T, sm, L['sw'] * SL, L['irp'], L['itp'], 0, L['iq'] & 1, lane, lane & 3, key, coop)
                if L['iq'] & 1:
                    L['irp'] = [[x + G for x in row] for row in L['irp']]; L['itp'] += G
                tag = (L['sw'], key)
                L['sw'] = 0 if L['sw'] + 1 == depth else L['sw'] + 1
                L['iq'] += 1
                if L['iq'] == L['inq']: next_issue_item(L, lane, L['iit'] + 1)
        if tag:
            prev = slot_of.get(tag[0])
            assert prev is None or prev in consumed, 'overwrite before read'
            slot_of[tag[0]] = tag[1]
        issued.append(tag[1] if tag else None)
    for _ in range(depth - 1): ring_issue()
    for it, (base, rows, S, r0, s0, s1) in enumerate(items):
        for s in range(s0, s1):
            for stg in range(2):
                q = (it, 2 * (s - s0) + stg)
                ring_issue()
                done = issued[:len(issued) - (depth - 1)]
                assert q in done, ('not complete', q)
                sr = st[0]['sr']
                assert slot_of[sr] == q
                for lane, L in enumerate(st):
                    g = lane >> 2; rb = G * S
                    rp = [[base + min(r0 + 16 * mt + 8 * h + g, rows - 1) * rb + s * G for h in range(2)] for mt in range(2)]
                    tp = base + min(r0 + lane, rows - 1) * rb + s * G
                    assert read_stage(T, sm, sr * SL, lane, q, coop, rp) == v2_load_stage(T, rp, stg, lane & 3), ('raw', q)
                    if stg == 0: assert read_hdr(T, sm, sr * SL, lane, q) == v2_load_hdr(T, tp), ('hdr', q)
                    L['sr'] = 0 if sr + 1 == depth else sr + 1
                consumed.add(q)
    assert all(L['iit'] >= len(items) for L in st)

npers = 0
for T in GROUP:
    G = GROUP[T]
    for coop in ([False, True] if T in ('Q4_K', 'Q5_K', 'Q6_K') else [False]):
        for depth in range(2, 9):
            S = 5
            b2 = 4096 + 16 + 200 * G * S + (32 if T == 'Q6_K' else 0)  # a second matrix (q/k/v launch)
            items = [(4112, 130, S, 96, 0, 2), (4112, 130, S, 0, 2, 5), (4112, 130, S, 32, 3, 3),  # an empty part
                     (b2, 70, 3, 32, 1, 3), (4112, 130, S, 64, 0, 1)]
            run_persist(T, items, depth, coop)
            npers += 1
print('persistent ring emulation OK:', npers, 'cases (items across row blocks, K parts, two matrices, an empty item)')
