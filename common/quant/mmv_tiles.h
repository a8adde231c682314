// The GPU tile layout of quantized matrices ("mmv tiles") and the arithmetic
// of the CUDA matrix-vector product over it, shared by the host (packing,
// tests, the bit-exact emulator in mmv_tiles.cc) and the device
// (common/backend/cuda/k_matvec.cu).
//
// Why a layout of our own: the decode/verify product is bound by how fast the
// weights stream from memory. GGUF stores a row's blocks one after another,
// so the lanes of a warp that feed one integer tensor-core MMA (16 rows x 32
// elements) would each read a few bytes from 16 different rows. Here a matrix
// is re-laid at load time, losslessly and in the same number of bytes, so
// that every lane reads exactly its MMA fragment with 16-byte loads and every
// warp-wide load covers 512 contiguous bytes.
//
// Matrix of R rows x K elements -> tiles of 16 rows x groups of 256 elements
// (rows padded to 16 and K to 256 with zeros). Each (tile, group) is one
// record of Layout::rec bytes; records are stored tile-major
// ((tile * groups + group) * rec), so a warp walking a tile's groups streams
// one contiguous range. A record holds bit planes of the elements' integer
// codes in fragment order, then the rows' scales ("aux").
//
// Fragment order (lane L = 4 g + t of a warp, g = L / 4, t = L % 4), for a
// 32-element unit u of the group: the A fragment of mma.m16n8k32 is four
// 32-bit registers j = 0..3 of four 8-bit codes each; register j holds row
// g + 8 (j & 1) of the tile, elements 16 (j >> 1) + 4 t + i (i = 0..3) of
// the unit. Every plane stores, per lane, the bits of exactly these codes:
//   4-bit plane (2048 B): 4 chunks of 512 B; chunk c holds units 2c and
//     2c+1; lane L's uint4 = registers j = 0..3, byte i = code(unit 2c) |
//     code(unit 2c+1) << 4.
//   2-bit plane (1024 B): word u (unit) of the lane: byte i bits 2j, 2j+1.
//     Two uint4 per lane (words 0-3, 4-7), at +512 apart.
//   1-bit plane (512 B): word u/2 of the lane: byte i bit 4 (u % 2) + j.
//   8-bit plane (4096 B): unit u's uint4 of the lane at 512 u: word j.
// The same element order serves m16n8k16 (16-element units: 16-unit 2u is
// registers 0-1, 16-unit 2u+1 registers 2-3).
//
// Activations ("xq") are quantized per column and group of 256 to two int8
// levels, x ~ s * (254 hi + lo) (about 16 significant bits), in B-fragment
// order, with the unit sums the mins/offsets need: see XqLayout below.
//
// The product, per output (row r, column c) and group: for k-quants the
// integer dots D_u = sum DotCode x (254 hi + lo) of the units are scaled by
// the units' integer scales in int32 (exact), the mins come from an exact
// integer sum of the unit sums, and one float expression per group
// (KGroupValue) turns them into the group's value; legacy formats (float
// scale per 32) fold each unit in float (LegacyUnit). Groups are accumulated
// in order within a warp's fixed range of groups, and the warps' partial sums
// in warp order. The partition depends only on the matrix shapes and the
// device's multiprocessor count (PlanFor), never on the number of columns:
// a k+1-token verify reproduces single-token decode bit for bit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/gguf/ggml_types.h"
#include "common/quant/block_dequant.h"
#include "common/util/hd.h"

namespace specd::mmv {

constexpr int kTileRows = 16;
constexpr int kGroup = 256;
constexpr int kUnits = 8;  // 32-element units per group
constexpr int kMaxWarps = 8;

struct Layout {
  int rec = 0;                     // bytes per (tile, group) record; 0: no layout
  int p4 = -1, p2 = -1, p1 = -1, p8 = -1;  // plane offsets in the record
  int aux_a = -1, aux_a_row = 0;   // per-row aux data: 16 rows x aux_a_row bytes
  int aux_b = -1, aux_b_row = 0;   // second per-row area (d / dmin where they are apart)
  bool unit16 = false;             // scales per 16 elements (Q2_K, Q3_K, Q6_K)
  bool kquant = false;             // integer unit scales + one d per group
};

SPECD_HD constexpr Layout LayoutOf(GgmlType t) {
  Layout l;
  switch (t) {
    case GgmlType::Q4_0: l.p4 = 0; l.aux_a = 2048; l.aux_a_row = 16; l.rec = 2304; break;
    case GgmlType::Q4_1: l.p4 = 0; l.aux_a = 2048; l.aux_a_row = 32; l.rec = 2560; break;
    case GgmlType::Q5_0: l.p4 = 0; l.p1 = 2048; l.aux_a = 2560; l.aux_a_row = 16; l.rec = 2816; break;
    case GgmlType::Q5_1: l.p4 = 0; l.p1 = 2048; l.aux_a = 2560; l.aux_a_row = 32; l.rec = 3072; break;
    case GgmlType::Q8_0: l.p8 = 0; l.aux_a = 4096; l.aux_a_row = 16; l.rec = 4352; break;
    case GgmlType::Q2_K:
      l.p2 = 0; l.aux_a = 1024; l.aux_a_row = 16; l.aux_b = 1280; l.aux_b_row = 4; l.rec = 1344;
      l.unit16 = l.kquant = true;
      break;
    case GgmlType::Q3_K:
      l.p2 = 0; l.p1 = 1024; l.aux_a = 1536; l.aux_a_row = 12; l.aux_b = 1728; l.aux_b_row = 2; l.rec = 1760;
      l.unit16 = l.kquant = true;
      break;
    case GgmlType::Q4_K: l.p4 = 0; l.aux_a = 2048; l.aux_a_row = 16; l.rec = 2304; l.kquant = true; break;
    case GgmlType::Q5_K:
      l.p4 = 0; l.p1 = 2048; l.aux_a = 2560; l.aux_a_row = 16; l.rec = 2816; l.kquant = true;
      break;
    case GgmlType::Q6_K:
      l.p4 = 0; l.p2 = 2048; l.aux_a = 3072; l.aux_a_row = 16; l.aux_b = 3328; l.aux_b_row = 2; l.rec = 3360;
      l.unit16 = l.kquant = true;
      break;
    default: break;
  }
  return l;
}

SPECD_HD bool HasLayout(GgmlType t) { return LayoutOf(t).rec != 0; }
SPECD_HD int64_t Tiles(int64_t rows) { return (rows + kTileRows - 1) / kTileRows; }
SPECD_HD int64_t Groups(int64_t k) { return (k + kGroup - 1) / kGroup; }
// Bytes of a packed matrix.
SPECD_HD size_t PackedBytes(GgmlType t, int64_t rows, int64_t k) {
  return static_cast<size_t>(Tiles(rows)) * static_cast<size_t>(Groups(k)) * static_cast<size_t>(LayoutOf(t).rec);
}
SPECD_HD size_t RecordOffset(GgmlType t, int64_t groups, int64_t tile, int64_t group) {
  return (static_cast<size_t>(tile) * static_cast<size_t>(groups) + static_cast<size_t>(group)) *
         static_cast<size_t>(LayoutOf(t).rec);
}

// Fragment order: row of the tile and element of the unit held by byte i of
// register j of lane (g, t).
SPECD_HD int FragRow(int g, int j) { return g + 8 * (j & 1); }
SPECD_HD int FragElem(int t, int j, int i) { return 16 * (j >> 1) + 4 * t + i; }

// One row's share of a record: its aux bytes (the scales) and the integer
// code of each of the group's 256 elements (plane bits; Q8_0: the int8 as a
// byte).
struct RowAux {
  uint8_t a[32];
  uint8_t b[4];
};
struct RowGroup : RowAux {
  uint8_t code[kGroup];
};

SPECD_HD uint16_t Ld16Le(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// GGUF block bytes of one format: (elements per block, bytes per block).
SPECD_HD int GgufBlockBytes(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return 18;
    case GgmlType::Q4_1: return 20;
    case GgmlType::Q5_0: return 22;
    case GgmlType::Q5_1: return 24;
    case GgmlType::Q8_0: return 34;
    case GgmlType::Q2_K: return 84;
    case GgmlType::Q3_K: return 110;
    case GgmlType::Q4_K: return 144;
    case GgmlType::Q5_K: return 176;
    case GgmlType::Q6_K: return 210;
    default: return 0;
  }
}

// The code of element e (0..255) of group g of a GGUF row of k elements;
// 0 past k (legacy formats, whose rows are whole 32-blocks, only).
SPECD_HD uint8_t CodeAt(GgmlType t, const uint8_t* row, int64_t k, int64_t g, int e) {
  const int bytes = GgufBlockBytes(t);
  switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0: {
      const int64_t blk = g * kUnits + e / kQK;
      if (blk * kQK >= k) return 0;
      const uint8_t* p = row + blk * bytes;
      const int i = e % kQK;
      if (t == GgmlType::Q8_0) return p[2 + i];
      const bool has_m = t == GgmlType::Q4_1 || t == GgmlType::Q5_1;
      const bool five = t == GgmlType::Q5_0 || t == GgmlType::Q5_1;
      const uint8_t* qs = p + (has_m ? 4 : 2) + (five ? 4 : 0);
      int c = i < 16 ? qs[i] & 0xF : qs[i - 16] >> 4;
      if (five) c |= ((LoadQh32(p + (has_m ? 4 : 2)) >> i) & 1u) << 4;
      return static_cast<uint8_t>(c);
    }
    case GgmlType::Q2_K: case GgmlType::Q3_K: {
      // Element order: for each 128-half h, bit pair q, the 32 bytes qs[32h ..).
      const bool q3 = t == GgmlType::Q3_K;
      const uint8_t* p = row + g * bytes;
      const int h = e / 128, q = (e % 128) / 32, l = e % 32;
      int c = (p[(q3 ? 32 : 16) + 32 * h + l] >> (2 * q)) & 3;
      if (q3) c |= ((p[l] >> (4 * h + q)) & 1) << 2;  // hmask bit: +4
      return static_cast<uint8_t>(c);
    }
    case GgmlType::Q4_K: case GgmlType::Q5_K: {
      // Pair c of units shares qs[32c ..): unit 2c low nibbles, 2c+1 high.
      const bool q5 = t == GgmlType::Q5_K;
      const uint8_t* p = row + g * bytes;
      const int c = e / 64, hi = (e % 64) / 32, l = e % 32;
      const uint8_t b = p[(q5 ? 48 : 16) + 32 * c + l];
      int v = hi ? b >> 4 : b & 0xF;
      if (q5) v |= ((p[16 + l] >> (2 * c + hi)) & 1) << 4;
      return static_cast<uint8_t>(v);
    }
    case GgmlType::Q6_K: {
      // Per 128-half h: low nibbles of ql[64h..+32), of ql[64h+32..+32), high
      // nibbles of the same; two more bits from qh[32h + l], pair q.
      const uint8_t* p = row + g * bytes;
      const int h = e / 128, q = (e % 128) / 32, l = e % 32;
      const uint8_t b = p[64 * h + 32 * (q & 1) + l];
      const int lo = q < 2 ? b & 0xF : b >> 4;
      return static_cast<uint8_t>(lo | (((p[128 + 32 * h + l] >> (2 * q)) & 3) << 4));
    }
    default: return 0;
  }
}

// The row's aux bytes of group g (the record's per-row areas a and b).
SPECD_HD void AuxAt(GgmlType t, const uint8_t* row, int64_t k, int64_t g, uint8_t* a, uint8_t* b) {
  const int bytes = GgufBlockBytes(t);
  switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0: {
      const int per = t == GgmlType::Q4_1 || t == GgmlType::Q5_1 ? 4 : 2;  // d (and m) per block
      for (int j = 0; j < kUnits; ++j) {
        const int64_t blk = g * kUnits + j;
        for (int i = 0; i < per; ++i) a[per * j + i] = blk * kQK < k ? row[blk * bytes + i] : 0;
      }
      return;
    }
    case GgmlType::Q2_K: {
      const uint8_t* p = row + g * bytes;
      for (int i = 0; i < 16; ++i) a[i] = p[i];
      for (int i = 0; i < 4; ++i) b[i] = p[80 + i];
      return;
    }
    case GgmlType::Q3_K: {
      const uint8_t* p = row + g * bytes;
      for (int i = 0; i < 12; ++i) a[i] = p[96 + i];
      b[0] = p[108];
      b[1] = p[109];
      return;
    }
    case GgmlType::Q4_K: case GgmlType::Q5_K: {
      const uint8_t* p = row + g * bytes;
      for (int i = 0; i < 16; ++i) a[i] = p[i];
      return;
    }
    case GgmlType::Q6_K: {
      const uint8_t* p = row + g * bytes;
      for (int i = 0; i < 16; ++i) a[i] = p[192 + i];
      b[0] = p[208];
      b[1] = p[209];
      return;
    }
    default: return;
  }
}

// The code's bits as stored in each plane.
SPECD_HD uint32_t Plane4(GgmlType t, uint8_t c) { return c & 0xF; }
SPECD_HD uint32_t Plane2(GgmlType t, uint8_t c) { return t == GgmlType::Q6_K ? c >> 4 : c & 3; }
SPECD_HD uint32_t Plane1(GgmlType t, uint8_t c) { return t == GgmlType::Q3_K ? (c >> 2) & 1 : (c >> 4) & 1; }

// Writes lane L's share of the record of group g: its plane words (the codes
// of its fragments, rows L/4 and L/4 + 8) and, for L < 16, row L's aux bytes.
// rows[rr]: the GGUF rows of the tile (nullptr past the matrix: zeros). The
// host packs a record by calling it for L = 0..31, the device with one warp.
SPECD_HD void PackLane(GgmlType t, const uint8_t* const* rows, int64_t k, int64_t g, int L, uint8_t* rec) {
  const Layout l = LayoutOf(t);
  const int gq = L / 4, tt = L % 4;
  auto code = [&](int u, int j, int i) -> uint8_t {
    const uint8_t* row = rows[FragRow(gq, j)];
    return row ? CodeAt(t, row, k, g, 32 * u + FragElem(tt, j, i)) : 0;
  };
  auto store = [&](int off, uint32_t w) {
    uint8_t* p = rec + off;
    p[0] = static_cast<uint8_t>(w);
    p[1] = static_cast<uint8_t>(w >> 8);
    p[2] = static_cast<uint8_t>(w >> 16);
    p[3] = static_cast<uint8_t>(w >> 24);
  };
  for (int u = 0; u < kUnits; ++u) {
    uint32_t w2 = 0, w1 = 0;
    for (int j = 0; j < 4; ++j) {
      uint32_t w8 = 0, w4 = 0;
      for (int i = 0; i < 4; ++i) {
        const uint8_t c = code(u, j, i);
        w8 |= static_cast<uint32_t>(c) << (8 * i);
        w4 |= Plane4(t, c) << (8 * i + 4 * (u % 2));
        w2 |= Plane2(t, c) << (8 * i + 2 * j);
        w1 |= Plane1(t, c) << (8 * i + 4 * (u % 2) + j);
      }
      if (l.p8 >= 0) store(l.p8 + 512 * u + 16 * L + 4 * j, w8);
      if (l.p4 >= 0 && u % 2 == 1) {  // both units of the chunk: re-read the even one
        uint32_t we = 0;
        for (int i = 0; i < 4; ++i) we |= Plane4(t, code(u - 1, j, i)) << (8 * i);
        store(l.p4 + 512 * (u / 2) + 16 * L + 4 * j, w4 | we);
      }
    }
    if (l.p2 >= 0) store(l.p2 + 512 * (u / 4) + 16 * L + 4 * (u % 4), w2);
    if (l.p1 >= 0) {
      if (u % 2 == 0) {
        store(l.p1 + 16 * L + 4 * (u / 2), w1);
      } else {
        const uint8_t* p = rec + l.p1 + 16 * L + 4 * (u / 2);
        store(l.p1 + 16 * L + 4 * (u / 2),
              w1 | p[0] | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
                  (static_cast<uint32_t>(p[3]) << 24));
      }
    }
  }
  if (L < kTileRows) {
    uint8_t a[32] = {}, b[4] = {};
    if (rows[L]) AuxAt(t, rows[L], k, g, a, b);
    for (int i = 0; i < l.aux_a_row; ++i) rec[l.aux_a + l.aux_a_row * L + i] = a[i];
    for (int i = 0; i < l.aux_b_row; ++i) rec[l.aux_b + l.aux_b_row * L + i] = b[i];
  }
}

// The little-endian 32-bit word at p (4-byte aligned in a record).
SPECD_HD uint32_t Ld32Le(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint32_t*>(p);
#else
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
#endif
}

// The codes of elements 16 jh + 4 tt .. +3 of unit u of row rr of a record:
// one 32-bit word per plane (the inverse of PackLane for those four).
SPECD_HD void RecordCodes4(GgmlType t, const uint8_t* rec, int rr, int u, int jh, int tt, uint8_t* c) {
  const Layout l = LayoutOf(t);
  const int j = 2 * jh + rr / 8, L = 4 * (rr % 8) + tt;
  const uint32_t w8 = l.p8 >= 0 ? Ld32Le(rec + l.p8 + 512 * u + 16 * L + 4 * j) : 0;
  const uint32_t w4 = l.p4 >= 0 ? Ld32Le(rec + l.p4 + 512 * (u / 2) + 16 * L + 4 * j) : 0;
  const uint32_t w2 = l.p2 >= 0 ? Ld32Le(rec + l.p2 + 512 * (u / 4) + 16 * L + 4 * (u % 4)) : 0;
  const uint32_t w1 = l.p1 >= 0 ? Ld32Le(rec + l.p1 + 16 * L + 4 * (u / 2)) : 0;
  for (int i = 0; i < 4; ++i) {
    uint32_t v;
    if (l.p8 >= 0) {
      v = (w8 >> (8 * i)) & 0xFF;
    } else {
      v = l.p4 >= 0 ? (w4 >> (8 * i + 4 * (u % 2))) & 0xF : 0;
      if (l.p2 >= 0) {
        const uint32_t v2 = (w2 >> (8 * i + 2 * j)) & 3;
        v |= t == GgmlType::Q6_K ? v2 << 4 : v2;
      }
      if (l.p1 >= 0) v |= ((w1 >> (8 * i + 4 * (u % 2) + j)) & 1) << (t == GgmlType::Q3_K ? 2 : 4);
    }
    c[i] = static_cast<uint8_t>(v);
  }
}

// Byte i of row rr's aux areas (RowAux::a, i < 32; RowAux::b, i < 4): 0
// past the area's bytes per row. (The device's dequantization has a lane
// copy each byte; RecordAux copies them all.)
SPECD_HD uint8_t AuxByteA(const Layout& l, const uint8_t* rec, int rr, int i) {
  return i < l.aux_a_row ? rec[l.aux_a + l.aux_a_row * rr + i] : 0;
}
SPECD_HD uint8_t AuxByteB(const Layout& l, const uint8_t* rec, int rr, int i) {
  return i < l.aux_b_row ? rec[l.aux_b + l.aux_b_row * rr + i] : 0;
}

// Row rr's aux bytes of a record (its scales), as RowGroup holds them.
SPECD_HD void RecordAux(GgmlType t, const uint8_t* rec, int rr, RowAux* x) {
  const Layout l = LayoutOf(t);
  for (int i = 0; i < 32; ++i) x->a[i] = AuxByteA(l, rec, rr, i);
  for (int i = 0; i < 4; ++i) x->b[i] = AuxByteB(l, rec, rr, i);
}

// The inverse of PackLane for one row rr of the record.
SPECD_HD void DecodeRecordRow(GgmlType t, const uint8_t* rec, int rr, RowGroup* rg) {
  for (int u = 0; u < kUnits; ++u)
    for (int e = 0; e < 32; e += 4) RecordCodes4(t, rec, rr, u, e / 16, (e % 16) / 4, rg->code + 32 * u + e);
  RecordAux(t, rec, rr, rg);
}

// ---- scales from a row's aux bytes ----
SPECD_HD float AuxHalf(const uint8_t* p) { return HalfToFloat(Ld16Le(p)); }
// k-quants: the integer scale of unit u (32-element units; 16-element units
// for unit16 types) and, for the formats with mins, the unit's integer min.
SPECD_HD int KScale(GgmlType t, const RowAux& rg, int u) {
  uint8_t sc = 0, m = 0;
  switch (t) {
    case GgmlType::Q4_K: case GgmlType::Q5_K: GetScaleMinK4(u, rg.a + 4, &sc, &m); return sc;
    case GgmlType::Q6_K: return static_cast<int8_t>(rg.a[u]);
    case GgmlType::Q2_K: return rg.a[u] & 0xF;
    case GgmlType::Q3_K: return GetScaleQ3K(u, rg.a);
    default: return 0;
  }
}
SPECD_HD int KMin(GgmlType t, const RowAux& rg, int u) {
  uint8_t sc = 0, m = 0;
  switch (t) {
    case GgmlType::Q4_K: case GgmlType::Q5_K: GetScaleMinK4(u, rg.a + 4, &sc, &m); return m;
    case GgmlType::Q2_K: return rg.a[u] >> 4;
    default: return 0;
  }
}
// The group's d and the factor of the offset term: -dmin for the formats
// with mins (Q4_K, Q5_K, Q2_K); 0 for Q6_K and Q3_K, whose dots use signed
// codes (DotCode) and need no offset.
SPECD_HD float KD(GgmlType t, const RowAux& rg) {
  return t == GgmlType::Q4_K || t == GgmlType::Q5_K ? AuxHalf(rg.a) : AuxHalf(rg.b);
}
SPECD_HD float KOff(GgmlType t, const RowAux& rg) {
  switch (t) {
    case GgmlType::Q4_K: case GgmlType::Q5_K: return -AuxHalf(rg.a + 2);
    case GgmlType::Q2_K: return -AuxHalf(rg.b + 2);
    default: return 0.0f;
  }
}
SPECD_HD constexpr bool HasMins(GgmlType t) {
  return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q2_K || t == GgmlType::Q4_1 ||
         t == GgmlType::Q5_1;
}
// The integer an element contributes to the dots: the code itself for the
// formats with mins, the signed value (code - offset) for the others. (The
// device may scale signed values by a power of two and d by its inverse:
// the same bits.)
SPECD_HD int DotCode(GgmlType t, uint8_t c) {
  switch (t) {
    case GgmlType::Q8_0: return static_cast<int8_t>(c);
    case GgmlType::Q4_0: return c - 8;
    case GgmlType::Q5_0: return c - 16;
    case GgmlType::Q6_K: return c - 32;
    case GgmlType::Q3_K: return c - 4;
    default: return c;
  }
}
// Legacy formats: unit u's float scale d and min m (Q4_1/Q5_1; else 0).
SPECD_HD float LegacyD(GgmlType t, const RowAux& rg, int u) {
  return t == GgmlType::Q4_1 || t == GgmlType::Q5_1 ? AuxHalf(rg.a + 4 * u) : AuxHalf(rg.a + 2 * u);
}
SPECD_HD float LegacyM(GgmlType t, const RowAux& rg, int u) {
  return t == GgmlType::Q4_1 || t == GgmlType::Q5_1 ? AuxHalf(rg.a + 4 * u + 2) : 0.0f;
}

// Elements e0 .. e0+7 (e0 % 8 == 0) of row rr of a record, dequantized
// bit-identically to the GGUF dequantizers (block_dequant.h). Eight elements
// lie in one scale unit (32 elements; 16 for unit16 types), so a device
// thread reads two words per plane and its row's aux bytes.
SPECD_HD void DequantRecord8(GgmlType t, const uint8_t* rec, int rr, const RowAux& x, int e0, float* y) {
  const Layout l = LayoutOf(t);
  const int u = e0 / 32, ie = e0 % 32;
  uint8_t c[8];
  RecordCodes4(t, rec, rr, u, ie / 16, (ie % 16) / 4, c);
  RecordCodes4(t, rec, rr, u, ie / 16, (ie % 16) / 4 + 1, c + 4);
  if (!l.kquant) {
    const float d = LegacyD(t, x, u), m = LegacyM(t, x, u);
    for (int i = 0; i < 8; ++i) {
      if (t == GgmlType::Q8_0) y[i] = QMul(static_cast<float>(static_cast<int8_t>(c[i])), d);
      else if (t == GgmlType::Q4_0) y[i] = QMul(static_cast<float>(c[i] - 8), d);
      else if (t == GgmlType::Q5_0) y[i] = QMul(static_cast<float>(c[i] - 16), d);
      else y[i] = QMul(static_cast<float>(c[i]), d) + m;
    }
    return;
  }
  const float d = KD(t, x);
  if (t == GgmlType::Q4_K || t == GgmlType::Q5_K) {
    const float d1 = QMul(d, static_cast<float>(KScale(t, x, u)));
    const float m1 = QMul(AuxHalf(x.a + 2), static_cast<float>(KMin(t, x, u)));
    for (int i = 0; i < 8; ++i) y[i] = QMul(d1, static_cast<float>(c[i])) - m1;
    return;
  }
  const int u16 = e0 / 16;
  const float dl = QMul(d, static_cast<float>(KScale(t, x, u16)));
  if (t == GgmlType::Q6_K) {
    for (int i = 0; i < 8; ++i) y[i] = QMul(dl, static_cast<float>(c[i] - 32));
  } else if (t == GgmlType::Q2_K) {
    const float ml = QMul(AuxHalf(x.b + 2), static_cast<float>(KMin(t, x, u16)));
    for (int i = 0; i < 8; ++i) y[i] = QMul(dl, static_cast<float>(c[i])) - ml;
  } else {  // Q3_K
    for (int i = 0; i < 8; ++i) y[i] = QMul(dl, static_cast<float>(c[i] - 4));
  }
}

// ---- activations ----
// One record per (column tile of 8 columns, group): B fragments of the units
// ([unit][lane] uint4 {hi b0, hi b1, lo b0, lo b1}; lane (g, t) = column g,
// elements 4t..4t+3 (b0) and 16+4t..16+4t+3 (b1)), the unit sums
// Xi = sum (254 hi + lo) as 7-bit limbs in the B-fragment order of a
// m16n8k16 MMA over units (lane (g, t): uint4 {limb 0, limb 1, limb 2, 0},
// byte i = unit 4t + i; 32-element units: t < 2 only), the 32-unit sums as
// int32 [column][unit] (legacy formats), the column scales s, and the levels
// again K-major for wgmma's shared-memory B operand (the sm_90a wide kernel,
// k_matvec.cu): [unit][level][k-half][column][16 bytes], each (unit, level,
// k-half) an 8 x 16-byte core matrix, so a stage is whole 128-byte copies.
namespace xq {
constexpr int kFrag = 0;
constexpr int kLimb32 = 4096;
constexpr int kLimb16 = 4608;
constexpr int kSum32 = 5120;
constexpr int kScale = 5376;
constexpr int kWide = 5504;
constexpr int kRec = 9600;
}  // namespace xq
SPECD_HD size_t XqBytes(int n, int64_t k) { return static_cast<size_t>((n + 7) / 8) * Groups(k) * xq::kRec; }
SPECD_HD size_t XqRecordOffset(int64_t groups, int col, int64_t group) {
  return (static_cast<size_t>(col / 8) * static_cast<size_t>(groups) + static_cast<size_t>(group)) * xq::kRec;
}
// Byte of hi (lo: +8) of element e of a unit within the unit's 512-byte
// fragment block, for column g.
SPECD_HD int XqFragByte(int g, int e) {
  const int t = (e % 16) / 4;
  return (4 * g + t) * 16 + (e >= 16 ? 4 : 0) + e % 4;
}

// Byte of level lvl (0: hi, 1: lo) of element e of unit u, column g, in the
// record's K-major copy.
SPECD_HD int XqWideByte(int g, int u, int lvl, int e) {
  return xq::kWide + (((2 * u + lvl) * 2 + e / 16) * 8 + g) * 16 + e % 16;
}

// The quantization of one value given the group's amax (bit-exact on host and
// device: single IEEE operations, round-to-nearest-even).
SPECD_HD float XqInv(float amax) {
#if defined(__CUDA_ARCH__)
  return amax > 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
#else
  return amax > 0.0f ? 127.0f / amax : 0.0f;
#endif
}
SPECD_HD float XqScale(float amax) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(amax, 32258.0f);  // 127 * 254
#else
  return amax / 32258.0f;
#endif
}
SPECD_HD void XqHiLo(float v, float inv, int* hi, int* lo) {
#if defined(__CUDA_ARCH__)
  const float q = __fmul_rn(v, inv);
  const int h = max(-127, min(127, __float2int_rn(q)));
  *hi = h;
  *lo = max(-127, min(127, __float2int_rn(__fmul_rn(__fsub_rn(q, static_cast<float>(h)), 254.0f))));
#else
  const float q = QMul(v, inv);
  int h = static_cast<int>(__builtin_nearbyintf(q));
  h = h < -127 ? -127 : h > 127 ? 127 : h;
  *hi = h;
  const float r = QMul(q - static_cast<float>(h), 254.0f);
  int lv = static_cast<int>(__builtin_nearbyintf(r));
  *lo = lv < -127 ? -127 : lv > 127 ? 127 : lv;
#endif
}
// 7-bit limbs of a unit sum (|Xi| < 2^20): Xi = 16384 L2 + 128 L1 + L0.
SPECD_HD uint32_t XqLimbByte(int xi, int limb) {
  const int v = limb == 0 ? (xi & 127) : limb == 1 ? ((xi >> 7) & 127) : (xi >> 14);
  return static_cast<uint32_t>(static_cast<uint8_t>(static_cast<int8_t>(v)));
}

// ---- per-output arithmetic (identical on host and device) ----
SPECD_HD float I2F(int v) {
#if defined(__CUDA_ARCH__)
  return __int2float_rn(v);
#else
  return static_cast<float>(v);
#endif
}
SPECD_HD float Fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return __builtin_fmaf(a, b, c);
#endif
}
SPECD_HD float Add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
// k-quants: a group's value from its exact integer sums: shi/slo = sum over
// units of scale x D (hi / lo levels), m = sum over units of min x Xi (0
// without mins).
SPECD_HD float KGroupValue(int shi, int slo, int m, float d, float off) {
  const float s = Fma(254.0f, I2F(shi), I2F(slo));
  return Fma(d, s, QMul(off, I2F(m)));
}
// Legacy formats: folds unit u (dots dh/dl of DotCodes; with mins, the unit
// sum xi and min m) into the group value.
SPECD_HD float LegacyUnit(float acc, int dh, int dl, int xi, float d, float m, bool mins) {
  if (mins) acc = Fma(m, I2F(xi), acc);
  return Fma(d, Fma(254.0f, I2F(dh), I2F(dl)), acc);
}

// The split of a launch's records over its warps. Records are numbered
// tile-major (r = tile * groups + group; the tiles of all the launch's
// matrices in order). Each tile is one block of `tile_warps` warps; warp
// (t, j) takes the tile's groups [j gpw, (j + 1) gpw), so warp w's run is
// [Lo(w), Lo(w + 1)). A tile's warps ("parts") are summed in part order. The
// split depends on the shapes and the device only (never on the number of
// columns), so results are batch-invariant.
struct Plan {
  int64_t records = 1;
  int64_t groups = 1;
  int64_t warps = 1;  // of the launch
  int64_t tile_warps = 1, gpw = 1;
  static SPECD_HD Plan Tile(int64_t tiles, int64_t groups, int64_t tile_warps) {
    Plan p;
    p.groups = groups;
    p.records = tiles * groups;
    const int64_t w = tile_warps < 1 ? 1 : tile_warps > groups ? groups : tile_warps;
    p.gpw = (groups + w - 1) / w;
    p.tile_warps = (groups + p.gpw - 1) / p.gpw;
    p.warps = tiles * p.tile_warps;
    return p;
  }
  SPECD_HD int64_t Lo(int64_t w) const {
    if (w >= warps) return records;
    const int64_t g = (w % tile_warps) * gpw;
    return (w / tile_warps) * groups + (g < groups ? g : groups);
  }
  SPECD_HD int64_t Owner(int64_t r) const { return (r / groups) * tile_warps + (r % groups) / gpw; }
  SPECD_HD int64_t First(int64_t tile) const { return tile * tile_warps; }
  SPECD_HD int64_t Parts(int64_t) const { return tile_warps; }
};

}  // namespace specd::mmv

// ---- host side (mmv_tiles.cc): packing, activation quantization, and the
// bit-exact emulation of the device product that tests compare against ----

namespace specd::mmv {

// Packs a GGUF matrix (rows x k, row_bytes per row) into `out`
// (PackedBytes(t, rows, k) bytes).
void PackMatrix(GgmlType t, const void* gguf, size_t row_bytes, int64_t rows, int64_t k, uint8_t* out);
// Row `row` of a packed matrix, dequantized (k floats; bit-identical to the
// GGUF dequantization of the same row).
void DequantPackedRow(GgmlType t, const uint8_t* packed, int64_t rows, int64_t k, int64_t row, float* y);
// x: n columns of k floats -> XqBytes(n, k) bytes, as the device quantizes them.
std::vector<uint8_t> QuantizeActivations(const float* x, int n, int64_t k);
// y[c * rows + r] = W_r . x_c (+ bias[r]) for c < n, exactly as the device
// computes it with the same plan.
void Emulate(GgmlType t, const uint8_t* packed, int64_t rows, int64_t k, const uint8_t* xq, int n, const Plan& plan,
             const float* bias, float* y);

}  // namespace specd::mmv
