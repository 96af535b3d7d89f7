// msgpack-c's packer writes a float whose value is a whole number as an int (pack_double
// and pack_float, msgpack-c 4.x): fine for a reader that takes an int wherever a real is,
// wrong for the content hash, whose limits are always float64. These always write the
// float type: 0xcb + 8 bytes (or 0xca + 4), big-endian.
#pragma once

#include <cstdint>
#include <cstring>

namespace rtinfer::detail {

template <class Bits, class Buffer, class Real>
void pack_ieee(Buffer& buf, char tag, Real v) {
    static_assert(sizeof(Bits) == sizeof(Real));
    Bits bits;
    std::memcpy(&bits, &v, sizeof bits);
    char out[1 + sizeof bits] = {tag};
    for (size_t k = 0; k < sizeof bits; ++k) out[1 + k] = char(bits >> (8 * (sizeof bits - 1 - k)));
    buf.write(out, sizeof out);
}

template <class Buffer>
void pack_float64(Buffer& buf, double d) { pack_ieee<uint64_t>(buf, char(0xcb), d); }
template <class Buffer>
void pack_float32(Buffer& buf, float f) { pack_ieee<uint32_t>(buf, char(0xca), f); }

}  // namespace rtinfer::detail
