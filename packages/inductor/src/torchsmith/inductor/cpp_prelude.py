"""The C++ helpers every generated translation unit starts with: ops whose PyTorch semantics differ
from the plain C++ operator (nan-propagating max/min, Python-style remainder, integer pow, shifts)."""

CPP_PRELUDE = r"""
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace ts {

template <typename T> inline T maximum(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a > b ? a : b;
}

template <typename T> inline T minimum(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a < b ? a : b;
}

template <typename T> inline T remainder(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    T r = std::fmod(a, b);
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  } else {
    T r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  }
}

template <typename T> inline T fmod(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return std::fmod(a, b);
  else return a % b;
}

template <typename T> inline T pow(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::pow(a, b);
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

template <typename T> inline T sign(T a) { return static_cast<T>((T(0) < a) - (a < T(0))); }

template <typename T> inline bool signbit(T a) {
  if constexpr (std::is_floating_point_v<T>) return std::signbit(a);
  else return a < 0;
}

template <typename T> inline T shift_left(T a, T b) {
  using U = std::make_unsigned_t<T>;
  if (b < 0 || b >= static_cast<T>(sizeof(T) * 8)) return 0;
  return static_cast<T>(static_cast<U>(a) << b);
}

template <typename T> inline T shift_right(T a, T b) {
  if (b < 0 || b >= static_cast<T>(sizeof(T) * 8)) return a < 0 ? T(-1) : T(0);
  return a >> b;
}

template <typename T> inline T max_combine(T acc, T v) {
  if constexpr (std::is_floating_point_v<T>) { if (v != v) return v; }
  return v > acc ? v : acc;
}

template <typename T> inline T min_combine(T acc, T v) {
  if constexpr (std::is_floating_point_v<T>) { if (v != v) return v; }
  return v < acc ? v : acc;
}

}  // namespace ts
"""
