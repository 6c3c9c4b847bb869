"""The C++ helpers every generated translation unit starts with: ops whose PyTorch semantics differ
from the plain C++ operator (nan-propagating max/min, Python-style remainder, integer pow, shifts),
16-bit float conversions, and the state merges of reductions (Welford, argmax/argmin).

No C++ standard headers on purpose: parsing <cmath> alone costs g++ more time per translation unit
than all the kernels of a small graph. So the libm
functions are declared by `vector_math.declarations()` (with their SIMD variants) and called by their
C names (`expf`, `exp`), limits are literals (`cpp_types.cpp_limit`), and type tests are the two
small traits below. A precompiled header would save less and needs a cache of its own.
"""

CPP_PRELUDE = r"""
#include <stdint.h>

extern "C" int omp_get_max_threads(void);
extern "C" int omp_get_num_threads(void);
extern "C" int omp_get_thread_num(void);

namespace ts {

template <typename T> struct is_fp { static constexpr bool value = false; };
template <> struct is_fp<float> { static constexpr bool value = true; };
template <> struct is_fp<double> { static constexpr bool value = true; };

template <typename T> struct unsigned_of { using type = T; };
template <> struct unsigned_of<int8_t> { using type = uint8_t; };
template <> struct unsigned_of<int16_t> { using type = uint16_t; };
template <> struct unsigned_of<int32_t> { using type = uint32_t; };
template <> struct unsigned_of<int64_t> { using type = uint64_t; };

inline float c_fmod(float a, float b) { return __builtin_fmodf(a, b); }
inline double c_fmod(double a, double b) { return __builtin_fmod(a, b); }
inline float c_pow(float a, float b) { return __builtin_powf(a, b); }
inline double c_pow(double a, double b) { return __builtin_pow(a, b); }

template <typename T> inline T maximum(T a, T b) {
  if constexpr (is_fp<T>::value) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a > b ? a : b;
}

template <typename T> inline T minimum(T a, T b) {
  if constexpr (is_fp<T>::value) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a < b ? a : b;
}

// Set by an integer division or modulo by zero since the wrapper last looked (ts_take_zero_division):
// the kernel goes on with divisor 1 instead of trapping (SIGFPE), and the wrapper raises eager's
// RuntimeError after it. `inline`: one instance per library even when compiled in parts.
inline int32_t zero_division = 0;

template <typename T> inline T checked_divisor(T b) {
  if (__builtin_expect(b == 0, 0)) {
    __atomic_store_n(&zero_division, 1, __ATOMIC_RELAXED);
    return T(1);
  }
  return b;
}

// C's truncating division, which is what PyTorch's integer div computes; the most negative value
// divided by -1 wraps around (the hardware traps on it) and a zero divisor is recorded.
template <typename T> inline T int_div(T a, T b) {
  b = checked_divisor(b);
  if constexpr (T(-1) < T(0)) {
    if (b == T(-1)) {
      using U = typename unsigned_of<T>::type;
      return static_cast<T>(U(0) - static_cast<U>(a));
    }
  }
  return static_cast<T>(a / b);
}

// a % b with C's sign rule (fmod's); b == -1 gives 0 without the trapping instruction.
template <typename T> inline T int_mod(T a, T b) {
  b = checked_divisor(b);
  if constexpr (T(-1) < T(0)) {
    if (b == T(-1)) return T(0);
  }
  return static_cast<T>(a % b);
}

template <typename T> inline T remainder(T a, T b) {
  if constexpr (is_fp<T>::value) {
    T r = c_fmod(a, b);
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  } else {
    T r = int_mod(a, b);
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  }
}

template <typename T> inline T fmod(T a, T b) {
  if constexpr (is_fp<T>::value) return c_fmod(a, b);
  else return int_mod(a, b);
}

template <typename T> inline T pow(T a, T b) {
  if constexpr (is_fp<T>::value) {
    return c_pow(a, b);
  } else {
    if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b % 2) ? -1 : 1) : 0);
    T result = 1;
    while (b) {
      if (b & 1) result *= a;
      a *= a;
      b >>= 1;
    }
    return result;
  }
}

template <typename T> inline T abs(T a) {
  if constexpr (is_fp<T>::value) return __builtin_fabs(a);
  else return a < 0 ? static_cast<T>(-a) : a;
}
inline float abs(float a) { return __builtin_fabsf(a); }

template <typename T> inline T sign(T a) { return static_cast<T>((T(0) < a) - (a < T(0))); }

template <typename T> inline bool signbit(T a) {
  if constexpr (is_fp<T>::value) return __builtin_signbit(a);
  else return a < 0;
}

template <typename T> inline bool isnan(T a) {
  if constexpr (is_fp<T>::value) return a != a;
  else return false;
}

template <typename T> inline bool isinf(T a) {
  if constexpr (is_fp<T>::value) return __builtin_isinf(a);
  else return false;
}

template <typename T> inline bool isfinite(T a) {
  if constexpr (is_fp<T>::value) return __builtin_isfinite(a);
  else return true;
}

template <typename T> inline T shift_left(T a, T b) {
  using U = typename unsigned_of<T>::type;
  if (b < 0 || b >= static_cast<T>(sizeof(T) * 8)) return 0;
  return static_cast<T>(static_cast<U>(a) << b);
}

template <typename T> inline T shift_right(T a, T b) {
  if (b < 0 || b >= static_cast<T>(sizeof(T) * 8)) return a < 0 ? T(-1) : T(0);
  return a >> b;
}

// `keep ? a : b` for a `keep` that is the same in every iteration of a simd loop (a padded
// image's border row), as bit operations: GCC does not vectorize a loop whose select has a
// loop-invariant condition (it turns it into a branch). The same bits as the select, NaNs too.
template <typename T, typename U> inline T blend_bits(bool keep, T a, T b) {
  static_assert(sizeof(T) == sizeof(U), "blend_bits: an unsigned type of the value's size");
  const U m = U(0) - static_cast<U>(keep);
  U x, y;
  __builtin_memcpy(&x, &a, sizeof x);
  __builtin_memcpy(&y, &b, sizeof y);
  const U r = (x & m) | (y & ~m);
  T out;
  __builtin_memcpy(&out, &r, sizeof out);
  return out;
}
inline float blend(bool keep, float a, float b) { return blend_bits<float, uint32_t>(keep, a, b); }
inline double blend(bool keep, double a, double b) { return blend_bits<double, uint64_t>(keep, a, b); }

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

// Threads of a split reduction: as many as OpenMP would use, at most the partial arrays' size.
inline int threads(int most) {
  int n = omp_get_max_threads();
  return n < most ? n : most;
}

// bfloat16 is the top half of a float; narrowing rounds to nearest even and keeps nan a (quiet) nan.
inline float bf16_to_float(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }
// float16 kernels need the compiler's _Float16 (GCC >= 12 and clang on x86-64 and aarch64); other graphs
// must build with any compiler, so the helper is only defined where the type exists.
#ifdef __FLT16_MAX__
inline float round_f16(float f) { return static_cast<float>(static_cast<_Float16>(f)); }
#endif

// Chan et al.'s merge of two (count, mean, M2) summaries: the Welford state of their union.
inline void welford_combine(double& n, double& mean, double& m2, double bn, double bmean, double bm2) {
  if (bn == 0) return;
  const double total = n + bn;
  const double delta = bmean - mean;
  mean += delta * (bn / total);
  m2 += bm2 + delta * delta * (n * bn / total);
  n = total;
}

// Whether (v, i) beats the best (bv, bi) so far: the first nan wins, then the larger (smaller) value,
// then the smaller index, as torch.argmax (argmin) decides.
template <bool IsMax, typename T> inline bool arg_better(T v, int64_t i, T bv, int64_t bi) {
  if constexpr (is_fp<T>::value) {
    if (bv != bv) return v != v && i < bi;
    if (v != v) return true;
  }
  if (v == bv) return i < bi;
  return IsMax ? v > bv : v < bv;
}

}  // namespace ts

// Weak: each part of a split translation unit defines it; the linker keeps one.
extern "C" __attribute__((weak)) int32_t ts_take_zero_division(void) {
  return __atomic_exchange_n(&ts::zero_division, 0, __ATOMIC_RELAXED);
}
"""
