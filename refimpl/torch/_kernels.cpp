// The compiled CPU path of the fused distillation kernels: reverse and forward token KL,
// generalized JSD, Hinton KD (refimpl/torch/_compiled.py builds this file with the system's C++
// compiler and calls it through ctypes; see the notes there).
//
// Same numerics as the fused path of refimpl/torch/_fused.py (FastReverse, FastForward, FastJSD,
// FastHinton), row by row instead of tile by tile: pass A finds each model's first maximum, pass
// B computes the exponentials once (kept in per-thread row buffers that stay in L2) and the
// row's sums, the JSD's pass B' the log-ratios to the mixture and their sums, the per-row algebra
// runs in double, and the last pass writes the gradient (for the row's cotangent) in the
// student's dtype. Sums accumulate in double. Rows whose value is not finite or below the
// guard are flagged for the careful kernel (the caller's job), and their gradient is not written.
//
// Plain C++17, no PyTorch headers (a build takes seconds); the loops vectorise under
// -O3 with #pragma omp simd (-fopenmp-simd: no OpenMP runtime is linked; threads are the
// caller's).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace {

using bf16 = std::uint16_t;

inline float bits_to_float(std::uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}

inline std::uint32_t float_to_bits(float f) {
    std::uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
}

// exp for the working dtype. float: Cody–Waite reduction x = n·ln2 + r, |r| ≤ ln2/2, and the
// degree-6 polynomial of Cephes' expf (S. L. Moshier, Cephes Math Library, expf.c), then 2^n
// through the exponent field: about 1 ulp, written so that the loops vectorise (no call, no
// branch). Arguments here are ≤ 0 (a logit minus its row's maximum) or NaN: below −87.3 the
// result is 0 (the exact value is under 2^-126, negligible against a row sum ≥ 1), and a NaN
// stays NaN through r.
[[gnu::always_inline]] inline float exp_work(float x) {
    const float lo = -87.3f;
    float xc = x < lo ? lo : x;
    float n = std::rint(xc * 1.44269504088896341f);
    float r = std::fma(n, -0.693359375f, xc);
    r = std::fma(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = std::fma(p, r, 1.3981999507e-3f);
    p = std::fma(p, r, 8.3334519073e-3f);
    p = std::fma(p, r, 4.1665795894e-2f);
    p = std::fma(p, r, 1.6666665459e-1f);
    p = std::fma(p, r, 5.0000001201e-1f);
    float y = std::fma(p * r, r, r) + 1.0f;
    float scale = bits_to_float(static_cast<std::uint32_t>(static_cast<std::int32_t>(n) + 127) << 23);
    return x < lo ? 0.0f : y * scale;
}

inline double exp_work(double x) { return std::exp(x); }

// expm1 and log1p for the working dtype (the JSD's log-ratios to the mixture). float: written to
// vectorise (the library's expm1f/log1pf are calls, one logit at a time: five times slower
// than the torch tiles). double: the library's.
//
// expm1: x = n·ln2 + r as in exp_work, expm1(r) by its Taylor polynomial to degree 8 (|r| ≤
// ln2/2: truncation below 2^-30 relative), then 2^n·expm1(r) + (2^n − 1), 2^n − 1 exact in
// float for |n| ≤ 24; below −88 the result is −1, and above 88 +inf (2^n would overflow at
// n = 128: an overflow, a little early, makes the row non-finite and the careful kernel takes
// it); a NaN stays NaN through r.
inline float expm1_work(float x) {
    const float lo = -88.0f, hi = 88.0f;
    float xc = x < lo ? lo : (x > hi ? hi : x);
    float n = std::rint(xc * 1.44269504088896341f);
    float r = std::fma(n, -0.693359375f, xc);
    r = std::fma(n, 2.12194440e-4f, r);
    float p = 2.48015873e-5f;  // 1/8!
    p = std::fma(p, r, 1.98412698e-4f);
    p = std::fma(p, r, 1.38888889e-3f);
    p = std::fma(p, r, 8.33333333e-3f);
    p = std::fma(p, r, 4.16666667e-2f);
    p = std::fma(p, r, 1.66666667e-1f);
    p = std::fma(p, r, 0.5f);
    const float em = std::fma(p * r, r, r);  // expm1(r)
    const float scale = bits_to_float(static_cast<std::uint32_t>(static_cast<std::int32_t>(n) + 127) << 23);
    const float y = std::fma(scale, em, scale - 1.0f);
    return x < lo ? -1.0f : (x > hi ? std::numeric_limits<float>::infinity() : y);
}

inline double expm1_work(double x) { return std::expm1(x); }

// log1p for x ≥ −½ (the JSD's arguments: β·expm1(−r) with β ≤ ½, or (1−β)·expm1(r) with 1−β < ½),
// +inf and NaN: u = 1 + x rounded, log u by Cephes' logf (S. L. Moshier, Cephes Math Library,
// logf.c: the mantissa in [√½, √2), a degree-8 polynomial), plus the rounding of u,
// (x − (u − 1))/u (D. Goldberg, "What every computer scientist should know about floating-point
// arithmetic", ACM Computing Surveys 23(1), 1991, Theorem 4); x itself where u = 1.
inline float log1p_work(float x) {
    const float u = 1.0f + x;
    const std::uint32_t b = float_to_bits(u);
    float e = static_cast<float>(static_cast<std::int32_t>((b >> 23) & 0xFFu) - 126);
    float m = bits_to_float((b & 0x007FFFFFu) | 0x3F000000u);  // u = m·2^e, m in [½, 1)
    const bool low = m < 0.707106781186547524f;
    e = low ? e - 1.0f : e;
    m = low ? m + m - 1.0f : m - 1.0f;
    const float z = m * m;
    float y = 7.0376836292e-2f;
    y = std::fma(y, m, -1.1514610310e-1f);
    y = std::fma(y, m, 1.1676998740e-1f);
    y = std::fma(y, m, -1.2420140846e-1f);
    y = std::fma(y, m, 1.4249322787e-1f);
    y = std::fma(y, m, -1.6668057665e-1f);
    y = std::fma(y, m, 2.0000714765e-1f);
    y = std::fma(y, m, -2.4999993993e-1f);
    y = std::fma(y, m, 3.3333331174e-1f);
    y = y * m * z;
    y = std::fma(e, -2.12194440e-4f, y);
    y = std::fma(-0.5f, z, y);
    float l = m + y;
    l = std::fma(e, 0.693359375f, l);
    l += (x - (u - 1.0f)) / u;
    // +inf and NaN pass through (their exponent field is 255: the polynomial would not).
    return u == 1.0f ? x : (std::isfinite(u) ? l : u);
}

inline double log1p_work(double x) { return std::log1p(x); }

// Loads into the working dtype and stores from it, with one rounding (to nearest even).
template <typename In, typename W>
inline W load(const In* p, long j) { return static_cast<W>(p[j]); }

template <>
inline float load<bf16, float>(const bf16* p, long j) { return bits_to_float(static_cast<std::uint32_t>(p[j]) << 16); }

template <typename Out, typename W>
inline void store(Out* p, long j, W x) { p[j] = static_cast<Out>(x); }

template <>
inline void store<bf16, float>(bf16* p, long j, float x) {
    std::uint32_t b = float_to_bits(x);
    if (std::isnan(x)) {
        p[j] = static_cast<bf16>((b >> 16) | 0x40);  // quiet NaN, sign kept
        return;
    }
    b += 0x7FFFu + ((b >> 16) & 1u);
    p[j] = static_cast<bf16>(b >> 16);
}

struct Params {
    long n, v, stride_z, stride_t, stride_g;
    double T;
    double guard;   // u^GUARD of the working dtype
    double log_v;   // log(max(V, 2))
    double p1, p2;  // JSD: β; Hinton: α, s (the soft term's scale)
};

enum Kind { REVERSE = 0, FORWARD = 1, JSD = 2, HINTON = 3 };

// The row's maximum and the index of its first occurrence (torch.max's choice): the maximum of
// each block of BLOCK elements (vectorised), then a search of the first block that holds it.
constexpr long BLOCK = 512;

template <typename In, typename W>
W block_maxima(const In* x, long v, W* out) {
    const W ninf = -std::numeric_limits<W>::infinity();
    W m = ninf;
    for (long b = 0, k = 0; b < v; b += BLOCK, ++k) {
        const long e = b + BLOCK < v ? b + BLOCK : v;
        W mb = ninf;
#pragma omp simd reduction(max : mb)
        for (long j = b; j < e; ++j) {
            W a = load<In, W>(x, j);
            mb = a > mb ? a : mb;
        }
        out[k] = mb;
        m = mb > m ? mb : m;
    }
    return m;
}

template <typename In, typename W>
long first_index(const In* x, long v, W m, const W* maxima) {
    for (long b = 0, k = 0; b < v; b += BLOCK, ++k) {
        if (!(maxima[k] == m)) continue;
        const long e = b + BLOCK < v ? b + BLOCK : v;
        for (long j = b; j < e; ++j)
            if (load<In, W>(x, j) == m) return j;
    }
    return 0;  // no element equals m: a row of NaN (flagged by its value)
}

// Pass A: both models' maxima and first tops, each model's logit at the other's top, and the
// logit difference at the centring top (the student's when centre_t is false, else the
// teacher's) rounded to the working dtype as the tiles subtract it, with that rounding
// (g_err, added back to the values).
template <typename W>
struct Tops {
    W mz, mt, tz, zt, gc;
    long iz, it;
    double g_err;
};

template <typename In, typename W>
Tops<W> tops(const In* z, const In* t, long v, bool centre_t, W* kz, W* kt) {
    Tops<W> o;
    o.mz = block_maxima<In, W>(z, v, kz);
    o.mt = block_maxima<In, W>(t, v, kt);
    o.iz = first_index<In, W>(z, v, o.mz, kz);
    o.it = first_index<In, W>(t, v, o.mt, kt);
    o.tz = load<In, W>(t, o.iz);
    o.zt = load<In, W>(z, o.it);
    const double mz = o.mz, mt = o.mt, tz = o.tz, zt = o.zt;
    o.gc = centre_t ? static_cast<W>(o.mt - o.zt) : static_cast<W>(o.mz - o.tz);
    o.g_err = static_cast<double>(o.gc) - (centre_t ? mt - zt : mz - tz);
    return o;
}

// Up to four terms of a logit, summed over the row by sum_terms (unused ones stay 0).
struct Terms {
    double a = 0, b = 0, c = 0, d = 0;
};

// Σ_j terms(j) (terms returns Terms; K: how many are used). float terms are summed in double:
// the sums' rounding is far below the terms'. double terms: compensated sums (Neumaier), as
// accurate as summing in twice the precision. Named scalars, not an array: the float loop
// vectorises only so (GCC 12).
template <int K, typename W, typename F>
[[gnu::always_inline]] inline Terms sum_terms(long v, F terms) {
    Terms out;
    if constexpr (std::is_same_v<W, float>) {
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
        for (long j = 0; j < v; ++j) {
            const Terms x = terms(j);
            s0 += x.a;
            if constexpr (K > 1) s1 += x.b;
            if constexpr (K > 2) s2 += x.c;
            if constexpr (K > 3) s3 += x.d;
        }
        out = {s0, s1, s2, s3};
    } else {
        Terms c;
        auto add = [](double& s, double& comp, double x) {
            double u = s + x;
            comp += std::fabs(s) >= std::fabs(x) ? (s - u) + x : (x - u) + s;
            s = u;
        };
        for (long j = 0; j < v; ++j) {
            const Terms x = terms(j);
            add(out.a, c.a, x.a);
            if constexpr (K > 1) add(out.b, c.b, x.b);
            if constexpr (K > 2) add(out.c, c.c, x.c);
            if constexpr (K > 3) add(out.d, c.d, x.d);
        }
        out = {out.a + c.a, out.b + c.b, out.c + c.c, out.d + c.d};
    }
    return out;
}

// The fused forms' error bound u·M, M = |ℓ_top| + log1p S_q + log1p S_p + log V + 1 (_fused).
inline double guard_m(const Params& P, double top, double l1z, double l1t) {
    return std::fabs(top) + l1z + l1t + P.log_v + 1;
}

// The row buffers: the exponentials of z (bz), of t (bt; the JSD keeps its ℓ_q there once the
// sums are taken), of z at T = 1 (b1, Hinton at T ≠ 1); the block maxima past the end of bz, bt.
template <typename W>
struct Buffers {
    W *bz, *bt, *b1;
};

// One row of KL(q‖p) (reverse, forward = false) or KL(p‖q) (forward = true); returns true
// when the careful kernel must redo it. unit_t: T = 1, no division (a branch in the loops
// would keep them from vectorising).
template <typename In, typename W, bool forward, bool unit_t>
bool kl_row(const Params& P, const In* z, const In* t, In* g, long, double cot, double* value, Buffers<W> B) {
    const long v = P.v;
    W *bz = B.bz, *bt = B.bt;
    const Tops<W> o = tops<In, W>(z, t, v, forward, bz + v, bt + v);
    // Locals, not o's fields, in the loops: the stores into the buffers could alias o.
    const W Tw = static_cast<W>(P.T), mzw = o.mz, mtw = o.mt, gc = o.gc;
    const long iz = o.iz, it = o.it;
    // The exponentials (kept in bz, bt), and the row's terms: e_z, e_t (top excluded), e·d.
    const auto s = sum_terms<3, W>(v, [=](long j) -> Terms {
        W a = load<In, W>(z, j), b = load<In, W>(t, j);
        W xz = a - mzw, xt = b - mtw;
        W d = forward ? (b - a) - gc : (a - b) - gc;
        if constexpr (!unit_t) {
            xz = xz / Tw;
            xt = xt / Tw;
            d = d / Tw;
        }
        W ez = exp_work(xz), et = exp_work(xt);
        bz[j] = ez;
        if constexpr (forward) bt[j] = et;  // the reverse gradient needs only e_z
        return {j != iz ? static_cast<double>(ez) : 0.0, j != it ? static_cast<double>(et) : 0.0,
                static_cast<double>(forward ? et : ez) * static_cast<double>(d)};
    });
    const double sz = s.a, st = s.b, s0 = s.c;
    const double l1z = std::log1p(sz), l1t = std::log1p(st), qz = 1 / (1 + sz), pt = 1 / (1 + st);
    const double T = P.T, mz = o.mz, mt = o.mt, tz = o.tz, zt = o.zt;
    double top, val;
    if (forward) {
        top = -l1t - (zt - mz) / T + l1z;
        val = s0 * pt + o.g_err / T + top;
    } else {
        top = -(tz - mt) / T - l1z + l1t;
        val = s0 * qz + o.g_err / T + top;
    }
    *value = val;
    if (!std::isfinite(val) || val <= P.guard * guard_m(P, top, l1z, l1t) || !std::isfinite(mz) ||
        !std::isfinite(mt))
        return true;
    if (g == nullptr) return false;
    if (forward) {
        const W a = static_cast<W>(qz * cot / T), b = static_cast<W>(-pt * cot / T);
#pragma omp simd
        for (long j = 0; j < v; ++j) store<In, W>(g, j, bz[j] * a + bt[j] * b);
    } else {
        const W c = static_cast<W>(s0 * qz), scale = static_cast<W>(qz * cot / T);
#pragma omp simd
        for (long j = 0; j < v; ++j) {
            W d = (load<In, W>(z, j) - load<In, W>(t, j)) - gc;
            if constexpr (!unit_t) d = d / Tw;
            store<In, W>(g, j, ((d - c) * scale) * bz[j]);
        }
    }
    return false;
}

// One row of the generalized JSD β·KL(p‖m) + (1−β)·KL(q‖m), 0 < β < 1 (_fused.FastJSD): the
// log-ratios to the mixture from r = log q − log p, through log1p/expm1 on the side where
// their argument stays above −½ (low, β ≤ ½: ℓ_q first; β > ½: ℓ_p first; a template
// parameter: a branch in the loop would compute both sides).
template <typename In, typename W, bool unit_t, bool low>
bool jsd_row(const Params& P, const In* z, const In* t, In* g, long, double cot, double* value, Buffers<W> B) {
    const long v = P.v;
    W *bz = B.bz, *bt = B.bt;
    const Tops<W> o = tops<In, W>(z, t, v, false, bz + v, bt + v);
    const W Tw = static_cast<W>(P.T);
    const auto n = sum_terms<2, W>(v, [&](long j) -> Terms {
        W xz = load<In, W>(z, j) - o.mz, xt = load<In, W>(t, j) - o.mt;
        if constexpr (!unit_t) {
            xz = xz / Tw;
            xt = xt / Tw;
        }
        W ez = exp_work(xz), et = exp_work(xt);
        bz[j] = ez;
        bt[j] = et;
        return {j != o.iz ? static_cast<double>(ez) : 0.0, j != o.it ? static_cast<double>(et) : 0.0};
    });
    const double l1z = std::log1p(n.a), l1t = std::log1p(n.b), qz = 1 / (1 + n.a), pt = 1 / (1 + n.b);
    const double T = P.T, b = P.p1, mz = o.mz, mt = o.mt, tz = o.tz;
    const double r_top = -(tz - mt) / T - l1z + l1t;
    const double lq_top = b <= 0.5 ? -std::log1p(b * std::expm1(-r_top)) : -std::log1p((1 - b) * std::expm1(r_top)) + r_top;
    const W rc = static_cast<W>(r_top + o.g_err / T), lqc = static_cast<W>(lq_top);
    const W bw = static_cast<W>(b), cw = static_cast<W>(1 - b);
    // ℓ_q − ℓ_q,top replaces e_t in bt once e_t has been used.
    const auto s = sum_terms<2, W>(v, [&](long j) -> Terms {
        W d = (load<In, W>(z, j) - load<In, W>(t, j)) - o.gc;
        if constexpr (!unit_t) d = d / Tw;
        const W r = d + rc;
        W lq, lp;
        if constexpr (low) {
            lq = -log1p_work(expm1_work(-r) * bw);
            lp = lq - r;
        } else {
            lp = -log1p_work(expm1_work(r) * cw);
            lq = lp + r;
        }
        lq = lq - lqc;
        const double et = bt[j];
        bt[j] = lq;
        return {et * static_cast<double>(lp), static_cast<double>(bz[j]) * static_cast<double>(lq)};
    });
    const double c = s.b * qz;
    const double val = b * s.a * pt + (1 - b) * (c + lq_top);
    *value = val;
    if (!std::isfinite(val) || val <= P.guard * std::fmin(b, 1 - b) * guard_m(P, r_top, l1z, l1t) ||
        !std::isfinite(lq_top) || !std::isfinite(mz) || !std::isfinite(mt))
        return true;
    if (g == nullptr) return false;
    const W cc = static_cast<W>(c), scale = static_cast<W>((1 - b) * qz * cot / T);
#pragma omp simd
    for (long j = 0; j < v; ++j) store<In, W>(g, j, ((bt[j] - cc) * scale) * bz[j]);
    return false;
}

// One row of Hinton's (1−α)(−log q^{(1)}_y) + α·s·KL(p‖q) (_fused.FastHinton): the forward KL
// at T as kl_row, the student's normaliser at T = 1 for the hard term, and the label's entry of
// the gradient set apart (expm1 form).
template <typename In, typename W, bool unit_t>
bool hinton_row(const Params& P, const In* z, const In* t, In* g, long y, double cot, double* value, Buffers<W> B) {
    const long v = P.v;
    W *bz = B.bz, *bt = B.bt, *b1 = B.b1;
    const Tops<W> o = tops<In, W>(z, t, v, true, bz + v, bt + v);
    const W Tw = static_cast<W>(P.T);
    const auto s = sum_terms<4, W>(v, [&](long j) -> Terms {
        W a = load<In, W>(z, j), b = load<In, W>(t, j);
        W xz = a - o.mz, xt = b - o.mt;
        W d = (b - a) - o.gc;
        double e1 = 0;
        if constexpr (!unit_t) {
            W x1 = exp_work(xz);
            b1[j] = x1;
            e1 = j != o.iz ? static_cast<double>(x1) : 0.0;
            xz = xz / Tw;
            xt = xt / Tw;
            d = d / Tw;
        }
        W ez = exp_work(xz), et = exp_work(xt);
        bz[j] = ez;
        bt[j] = et;
        return {j != o.iz ? static_cast<double>(ez) : 0.0, j != o.it ? static_cast<double>(et) : 0.0,
                static_cast<double>(et) * static_cast<double>(d), e1};
    });
    const double sz = s.a, st = s.b, s0 = s.c;
    const double l1z = std::log1p(sz), l1t = std::log1p(st), qz = 1 / (1 + sz), pt = 1 / (1 + st);
    const double l11 = unit_t ? l1z : std::log1p(s.d), q1 = unit_t ? qz : 1 / (1 + s.d);
    const double T = P.T, a = P.p1, sc = P.p2, mz = o.mz, mt = o.mt, zt = o.zt;
    const double zy = load<In, W>(z, y), ty = load<In, W>(t, y);
    const double top = -l1t - (zt - mz) / T + l1z;
    const double kl = s0 * pt + o.g_err / T + top;
    const double ce = l11 - (zy - mz);
    const double val = (1 - a) * ce + a * sc * kl;
    *value = val;
    if (!std::isfinite(val) || !std::isfinite(kl) || (a > 0 && kl <= P.guard * guard_m(P, top, l1z, l1t)) ||
        !std::isfinite(mz) || !std::isfinite(mt))
        return true;
    if (g == nullptr) return false;
    const double qy = std::exp((zy - mz) / T - l1z), py = std::exp((ty - mt) / T - l1t);
    const double fix = cot * ((1 - a) * std::expm1(-ce) + a * sc / T * (qy - py));
    const W ca = static_cast<W>(a * sc * qz * cot / T), cb = static_cast<W>(-a * sc * pt * cot / T);
    const W c1 = static_cast<W>((1 - a) * q1 * cot);
    const W* e1 = unit_t ? bz : b1;
#pragma omp simd
    for (long j = 0; j < v; ++j) store<In, W>(g, j, (bz[j] * ca + bt[j] * cb) + e1[j] * c1);
    store<In, W>(g, y, static_cast<W>(fix));
    return false;
}

template <typename In, typename W>
using RowFn = bool (*)(const Params&, const In*, const In*, In*, long, double, double*, Buffers<W>);

template <typename In, typename W>
RowFn<In, W> row_fn(int kind, const Params& P) {
    const bool unit = P.T == 1.0, low = P.p1 <= 0.5;
    switch (kind) {
        case REVERSE: return unit ? kl_row<In, W, false, true> : kl_row<In, W, false, false>;
        case FORWARD: return unit ? kl_row<In, W, true, true> : kl_row<In, W, true, false>;
        case JSD:
            if (low) return unit ? jsd_row<In, W, true, true> : jsd_row<In, W, false, true>;
            return unit ? jsd_row<In, W, true, false> : jsd_row<In, W, false, false>;
        case HINTON: return unit ? hinton_row<In, W, true> : hinton_row<In, W, false>;
        default: return nullptr;
    }
}

template <typename In, typename W>
long rows(int kind, const Params& P, const void* zv, const void* tv, void* gv, const std::int64_t* labels,
          const double* cot, double* values, unsigned char* flags, long r0, long r1) {
    const RowFn<In, W> fn = row_fn<In, W>(kind, P);
    if (fn == nullptr) return -1;
    const long blocks = (P.v + BLOCK - 1) / BLOCK;
    std::vector<W> bz(P.v + blocks), bt(P.v + blocks), b1(kind == HINTON && P.T != 1.0 ? P.v : 0);
    const Buffers<W> B{bz.data(), bt.data(), b1.data()};
    const In* z = static_cast<const In*>(zv);
    const In* t = static_cast<const In*>(tv);
    In* g = static_cast<In*>(gv);
    long flagged = 0;
    for (long r = r0; r < r1; ++r) {
        const bool f = fn(P, z + r * P.stride_z, t + r * P.stride_t, g ? g + r * P.stride_g : nullptr,
                          labels ? static_cast<long>(labels[r]) : 0, cot[r], values + r, B);
        flags[r] = f;
        flagged += f;
    }
    return flagged;
}

// ---------------------------------------------------------------------------------------------
// Token cross-entropy (lm.cross_entropy; refimpl/torch/_fused_ce.py): per counted row
// (1−ε)(lse − z'_y) + ε(lse − mean z') + ζ·lse², z' = s·tanh(z/s) when capped, and its gradient
// cot·[q_j − (1−ε)δ_{jy} − ε/V + 2ζ·lse·q_j]·sech²(z_j/s). Pass A: the capped logits (into the
// row buffer) and the first maximum; pass B: the exponentials (into the buffer), the normaliser
// S = Σ_{j≠top} e^{x_j} (top excluded: log1p(S) keeps a saturated row's −log q_top) and, with
// smoothing, Σ (max − z'_j) over the finite logits; the row's algebra in double; the last pass
// writes the gradient, the label's entry in the expm1 form (no cancellation at q_y ≈ 1). The
// gradient may overwrite the logits (g == z): each pass reads z_j before it writes g_j, and
// z'_y is read before the last pass.

struct CeParams {
    long v, stride_z, stride_g;
    double eps, zeta, cap;  // cap = 0: no soft-capping
};

// tanh(a) and sech²(a) from e = e^{−2|a|} − 1 (expm1: no cancellation at small |a|):
// tanh|a| = −e/(2 + e), sech² a = 4(1 + e)/(2 + e)².
template <typename W>
[[gnu::always_inline]] inline void tanh_sech2(W a, W& th, W& s2) {
    const W t = a < 0 ? -a : a;
    const W e = expm1_work(static_cast<W>(-2) * t);
    const W d = static_cast<W>(2) + e;
    const W th_abs = -e / d;
    th = a < 0 ? -th_abs : th_abs;
    s2 = static_cast<W>(4) * (static_cast<W>(1) + e) / (d * d);
}

template <typename In, typename W, bool capped>
bool ce_row(const CeParams& P, const In* z, In* g, long y, bool counted, double cot, double* value, W* bz) {
    const long v = P.v;
    if (!counted) {
        *value = 0;
        if (g != nullptr) {
#pragma omp simd
            for (long j = 0; j < v; ++j) store<In, W>(g, j, static_cast<W>(0));
        }
        return false;
    }
    const W capw = static_cast<W>(P.cap);
    W* maxima = bz + v;
    W m;
    long top;
    W zy;
    if constexpr (capped) {
#pragma omp simd
        for (long j = 0; j < v; ++j) {
            W th, s2;
            tanh_sech2<W>(load<In, W>(z, j) / capw, th, s2);
            bz[j] = capw * th;
        }
        m = block_maxima<W, W>(bz, v, maxima);
        top = first_index<W, W>(bz, v, m, maxima);
        zy = bz[y];
    } else {
        m = block_maxima<In, W>(z, v, maxima);
        top = first_index<In, W>(z, v, m, maxima);
        zy = load<In, W>(z, y);
    }
    const W ninf = -std::numeric_limits<W>::infinity();
    const W mm = m == ninf ? static_cast<W>(0) : m;
    const auto s = sum_terms<2, W>(v, [=](long j) -> Terms {
        const W zc = capped ? bz[j] : load<In, W>(z, j);
        const W e = exp_work(zc - mm);
        bz[j] = e;
        return {j != top ? static_cast<double>(e) : 0.0, zc > ninf ? static_cast<double>(mm - zc) : 0.0};
    });
    const double l1 = std::log1p(s.a), lse = static_cast<double>(mm) + l1;
    const double xy = static_cast<double>(static_cast<W>(zy - mm));
    const double eps = P.eps, zeta = P.zeta;
    double val = (1 - eps) * (-xy + l1);
    if (eps != 0) val += eps * (s.b / static_cast<double>(v) + l1);
    if (zeta != 0) val += zeta * lse * lse;
    *value = val;
    if (!std::isfinite(val) || !std::isfinite(static_cast<double>(m))) return true;
    if (g == nullptr) return false;
    const double q = 1 / (1 + s.a), logpy = xy - l1, py = std::exp(logpy);
    const double gy = ((eps == 1 ? py : std::expm1(logpy) + eps) - eps / static_cast<double>(v)) + 2 * zeta * lse * py;
    double dcap_y = 1;
    if constexpr (capped) {
        W th, s2;
        tanh_sech2<W>(load<In, W>(z, y) / capw, th, s2);
        dcap_y = s2;
    }
    const W a = static_cast<W>(cot * q * (1 + 2 * zeta * lse)), b = static_cast<W>(cot * eps / static_cast<double>(v));
#pragma omp simd
    for (long j = 0; j < v; ++j) {
        W gj = bz[j] * a - b;
        if constexpr (capped) {
            W th, s2;
            tanh_sech2<W>(load<In, W>(z, j) / capw, th, s2);
            gj = gj * s2;
        }
        store<In, W>(g, j, gj);
    }
    store<In, W>(g, y, static_cast<W>(cot * gy * dcap_y));
    return false;
}

template <typename In, typename W>
long ce_rows(const CeParams& P, const void* zv, void* gv, const std::int64_t* labels, const unsigned char* counted,
             const double* cot, double* values, unsigned char* flags, long r0, long r1) {
    const long blocks = (P.v + BLOCK - 1) / BLOCK;
    std::vector<W> bz(P.v + blocks);
    const In* z = static_cast<const In*>(zv);
    In* g = static_cast<In*>(gv);
    long flagged = 0;
    for (long r = r0; r < r1; ++r) {
        const In* zr = z + r * P.stride_z;
        In* gr = g ? g + r * P.stride_g : nullptr;
        const long y = static_cast<long>(labels[r]);
        const double c = cot ? cot[r] : 0.0;
        const bool f = P.cap != 0 ? ce_row<In, W, true>(P, zr, gr, y, counted[r], c, values + r, bz.data())
                                  : ce_row<In, W, false>(P, zr, gr, y, counted[r], c, values + r, bz.data());
        flags[r] = f;
        flagged += f;
    }
    return flagged;
}

}  // namespace

extern "C" {

// Rows r0..r1 of a fused kernel: kind 0 reverse token KL, 1 forward token KL, 2 generalized
// JSD (p1 = β, 0 < β < 1), 3 Hinton KD (p1 = α, p2 = s; labels: int64 [n], in range). dtype:
// 0 float64, 1 float32, 2 bfloat16, 3 float16 (student, teacher and gradient alike;
// float16/bfloat16 run in float32). grad may be null (values only). Returns the number of
// flagged rows, or -1 for an unknown kind or dtype.
long lossproof_distill(int kind, int dtype, const void* z, const void* t, void* grad, const std::int64_t* labels,
                       long n, long v, long stride_z, long stride_t, long stride_g, double T, double guard, double p1,
                       double p2, const double* cot, double* values, unsigned char* flags, long r0, long r1) {
    Params P{n, v, stride_z, stride_t, stride_g, T, guard, std::log(static_cast<double>(v > 2 ? v : 2)), p1, p2};
    switch (dtype) {
        case 0: return rows<double, double>(kind, P, z, t, grad, labels, cot, values, flags, r0, r1);
        case 1: return rows<float, float>(kind, P, z, t, grad, labels, cot, values, flags, r0, r1);
        case 2: return rows<bf16, float>(kind, P, z, t, grad, labels, cot, values, flags, r0, r1);
        case 3: return rows<_Float16, float>(kind, P, z, t, grad, labels, cot, values, flags, r0, r1);
        default: return -1;
    }
}

// Rows r0..r1 of the token cross-entropy: labels int64 [n] in [0, V) (any in-range value where a
// row is not counted), counted uint8 [n]; eps, zeta, cap (0: none) as lm.cross_entropy. dtype as
// lossproof_distill. grad may be null (values only) or equal to z (the gradient overwrites the
// logits); cot: the rows' cotangents (null with grad null). Returns the number of flagged rows
// (value not finite: the caller recomputes them), or -1 for an unknown dtype.
long lossproof_cross_entropy(int dtype, const void* z, void* grad, const std::int64_t* labels,
                             const unsigned char* counted, long v, long stride_z, long stride_g, double eps,
                             double zeta, double cap, const double* cot, double* values, unsigned char* flags,
                             long r0, long r1) {
    CeParams P{v, stride_z, stride_g, eps, zeta, cap};
    switch (dtype) {
        case 0: return ce_rows<double, double>(P, z, grad, labels, counted, cot, values, flags, r0, r1);
        case 1: return ce_rows<float, float>(P, z, grad, labels, counted, cot, values, flags, r0, r1);
        case 2: return ce_rows<bf16, float>(P, z, grad, labels, counted, cot, values, flags, r0, r1);
        case 3: return ce_rows<_Float16, float>(P, z, grad, labels, counted, cot, values, flags, r0, r1);
        default: return -1;
    }
}

}
