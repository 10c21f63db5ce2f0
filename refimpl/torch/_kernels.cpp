// The compiled CPU path of the reverse and forward token KL (refimpl/torch/_compiled.py builds
// this file with the system's C++ compiler and calls it through ctypes; see the notes there).
//
// Same numerics as the fused path of refimpl/torch/_fused.py (FastReverse, FastForward), row by
// row instead of tile by tile: pass A finds each model's first maximum, pass B computes the two
// exponentials once (kept in a per-thread row buffer that stays in L2) and the row's sums, the
// per-row algebra runs in double, and pass C writes the gradient (for the row's cotangent) in
// the student's dtype. Sums accumulate in double. Rows whose value is not finite or below the
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
inline float exp_work(float x) {
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
};

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

// One row of KL(q‖p) (reverse, forward = false) or KL(p‖q) (forward = true); returns true
// when the careful kernel must redo it. unit_t: T = 1, no division (a branch in the loops
// would keep them from vectorising).
template <typename In, typename W, bool forward, bool unit_t>
bool row(const Params& P, const In* z, const In* t, In* g, double cot, double* value, W* bz, W* bt) {
    const long v = P.v;
    // bz, bt hold the exponentials later; first, each block's maximum (a few per mille of them).
    W* kz = bz + v;
    W* kt = bt + v;
    const W mz = block_maxima<In, W>(z, v, kz), mt = block_maxima<In, W>(t, v, kt);
    const long iz = first_index<In, W>(z, v, mz, kz), it = first_index<In, W>(t, v, mt, kt);
    const W tz = load<In, W>(t, iz), zt = load<In, W>(z, it);
    // The logit difference at the centring top (student's for reverse, teacher's for forward),
    // rounded to the working dtype as the tiles subtract it; the rounding is added back.
    const W gc = forward ? static_cast<W>(mt - zt) : static_cast<W>(mz - tz);
    const double g_err = forward ? static_cast<double>(gc) - (static_cast<double>(mt) - static_cast<double>(zt))
                                 : static_cast<double>(gc) - (static_cast<double>(mz) - static_cast<double>(tz));
    const W Tw = static_cast<W>(P.T);
    // The exponentials (kept in bz, bt), and the row's terms: e_z, e_t (top excluded), e·d.
    struct Terms {
        double ez, et, ed;
    };
    auto terms = [&](long j) -> Terms {
        W a = load<In, W>(z, j), b = load<In, W>(t, j);
        W xz = a - mz, xt = b - mt;
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
    };
    double sz = 0, st = 0, s0 = 0;
    if constexpr (std::is_same_v<W, float>) {
        // float terms summed in double: the sums' rounding is far below the terms'.
#pragma omp simd reduction(+ : sz, st, s0)
        for (long j = 0; j < v; ++j) {
            Terms x = terms(j);
            sz += x.ez;
            st += x.et;
            s0 += x.ed;
        }
    } else {
        // double terms: compensated sums (Neumaier), as accurate as summing in twice the precision.
        double cz = 0, ct = 0, c0 = 0;
        auto add = [](double& s, double& c, double x) {
            double u = s + x;
            c += std::fabs(s) >= std::fabs(x) ? (s - u) + x : (x - u) + s;
            s = u;
        };
        for (long j = 0; j < v; ++j) {
            Terms x = terms(j);
            add(sz, cz, x.ez);
            add(st, ct, x.et);
            add(s0, c0, x.ed);
        }
        sz += cz;
        st += ct;
        s0 += c0;
    }
    const double l1z = std::log1p(sz), l1t = std::log1p(st), qz = 1 / (1 + sz), pt = 1 / (1 + st);
    const double T = P.T;
    double top, val;
    if (forward) {
        top = -l1t - (static_cast<double>(zt) - static_cast<double>(mz)) / T + l1z;
        val = s0 * pt + g_err / T + top;
    } else {
        top = -(static_cast<double>(tz) - static_cast<double>(mt)) / T - l1z + l1t;
        val = s0 * qz + g_err / T + top;
    }
    *value = val;
    const double m = std::fabs(top) + l1z + l1t + P.log_v + 1;
    if (!std::isfinite(val) || val <= P.guard * m || !std::isfinite(static_cast<double>(mz)) ||
        !std::isfinite(static_cast<double>(mt)))
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

template <typename In, typename W>
long rows(int forward, const Params& P, const void* zv, const void* tv, void* gv, const double* cot,
          double* values, unsigned char* flags, long r0, long r1) {
    // Row buffers: the exponentials, then the block maxima past their end.
    const long blocks = (P.v + BLOCK - 1) / BLOCK;
    std::vector<W> bz(P.v + blocks), bt(P.v + blocks);
    const In* z = static_cast<const In*>(zv);
    const In* t = static_cast<const In*>(tv);
    In* g = static_cast<In*>(gv);
    long flagged = 0;
    const bool unit = P.T == 1.0;
    for (long r = r0; r < r1; ++r) {
        In* gr = g ? g + r * P.stride_g : nullptr;
        const In *zr = z + r * P.stride_z, *tr = t + r * P.stride_t;
        bool f;
        if (forward)
            f = unit ? row<In, W, true, true>(P, zr, tr, gr, cot[r], values + r, bz.data(), bt.data())
                     : row<In, W, true, false>(P, zr, tr, gr, cot[r], values + r, bz.data(), bt.data());
        else
            f = unit ? row<In, W, false, true>(P, zr, tr, gr, cot[r], values + r, bz.data(), bt.data())
                     : row<In, W, false, false>(P, zr, tr, gr, cot[r], values + r, bz.data(), bt.data());
        flags[r] = f;
        flagged += f;
    }
    return flagged;
}

}  // namespace

extern "C" {

// Rows r0..r1 of the reverse (forward = 0) or forward (1) token KL. dtype: 0 float64, 1 float32,
// 2 bfloat16, 3 float16 (student, teacher and gradient alike; float16/bfloat16 run in float32).
// grad may be null (values only). Returns the number of flagged rows, or -1 for an unknown dtype.
long lossproof_token_kl(int forward, int dtype, const void* z, const void* t, void* grad, long n, long v,
                        long stride_z, long stride_t, long stride_g, double T, double guard, const double* cot,
                        double* values, unsigned char* flags, long r0, long r1) {
    Params P{n, v, stride_z, stride_t, stride_g, T, guard, std::log(static_cast<double>(v > 2 ? v : 2))};
    switch (dtype) {
        case 0: return rows<double, double>(forward, P, z, t, grad, cot, values, flags, r0, r1);
        case 1: return rows<float, float>(forward, P, z, t, grad, cot, values, flags, r0, r1);
        case 2: return rows<bf16, float>(forward, P, z, t, grad, cot, values, flags, r0, r1);
        case 3: return rows<_Float16, float>(forward, P, z, t, grad, cot, values, flags, r0, r1);
        default: return -1;
    }
}

}
