// The encoder: the same checks as the decoder, then msgpack-c's packer (shortest ints and
// strs, float64 reals, maps in the order given; arrays as ext 1, or ext 2 + a frame).
#include <msgpack.hpp>

#include "float_pack.hpp"
#include "rtinfer/wire.hpp"

namespace rtinfer::wire {

namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void le(std::string& out, uint64_t v, int n) {
    for (int k = 0; k < n; ++k) out.push_back(char((v >> (8 * k)) & 0xff));
}

std::string header(const NdArray& a) {
    std::string h;
    h.push_back(char(a.dtype));
    h.push_back(char(a.dims.size()));
    h.append(6, '\0');
    for (uint64_t d : a.dims) le(h, d, 8);
    return h;
}

void pack(msgpack::sbuffer& buf, Packer& pk, const Value& v, size_t oob_bytes,
          std::vector<std::string>& frames) {
    switch (v.kind) {
        case Value::Kind::Int:
            if (v.neg) pk.pack_int64(v.i); else pk.pack_uint64(v.u);
            return;
        case Value::Kind::Float:
            if (v.f32) detail::pack_float32(buf, float(v.f)); else detail::pack_float64(buf, v.f);
            return;
        case Value::Kind::Str:
            pk.pack_str(uint32_t(v.s.size()));
            pk.pack_str_body(v.s.data(), uint32_t(v.s.size()));
            return;
        case Value::Kind::Map:
            pk.pack_map(uint32_t(v.map.size()));
            for (const auto& e : v.map) {
                pack(buf, pk, e.key, oob_bytes, frames);
                pack(buf, pk, e.value, oob_bytes, frames);
            }
            return;
        case Value::Kind::Array: {
            std::string payload = header(v.arr);
            int8_t code = 1;
            if (v.arr.nbytes >= oob_bytes) {
                frames.emplace_back(reinterpret_cast<const char*>(v.arr.data), v.arr.nbytes);
                le(payload, frames.size(), 8);
                code = 2;
            } else {
                payload.append(reinterpret_cast<const char*>(v.arr.data), v.arr.nbytes);
            }
            pk.pack_ext(payload.size(), code);
            pk.pack_ext_body(payload.data(), uint32_t(payload.size()));
            return;
        }
        default:
            throw WireError(ErrorKind::Schema, "cannot be packed: bodies hold only maps, strings, "
                            "numbers and ndarrays", "body");
    }
}

}  // namespace

std::vector<std::string> encode_frames(std::string_view topic, const Value& body, uint64_t seq,
                                       std::string_view src, const Stamps& stamps,
                                       size_t oob_bytes, size_t max_bytes) {
    std::vector<Entry> st;
    for (const auto& kv : stamps)
        st.push_back({Value::str(kv.first), Value::integer(kv.second)});
    Value env = Value::object({});
    env.map.push_back({Value::str("version"), Value::integer(SCHEMA_VERSION)});
    env.map.push_back({Value::str("topic"), Value::str(topic)});
    env.map.push_back({Value::str("seq"), Value::uinteger(seq)});
    env.map.push_back({Value::str("src"), Value::str(src)});
    env.map.push_back({Value::str("stamps"), Value::object(std::move(st))});
    env.map.push_back({Value::str("body"), body});
    msgpack::sbuffer buf;
    Packer pk(buf);
    std::vector<std::string> frames;
    pack(buf, pk, env, oob_bytes, frames);
    size_t total = buf.size();
    for (const auto& f : frames) total += f.size();
    if (total > max_bytes)
        throw WireError(ErrorKind::Oversize, "message (all frames) is " + std::to_string(total) +
                        " bytes, over the " + std::to_string(max_bytes) + "-byte limit");
    frames.insert(frames.begin(), std::string(buf.data(), buf.size()));
    // The decoder's own checks on the bytes: a message that encodes always decodes.
    std::vector<Frame> views;
    for (const auto& f : frames) views.push_back({reinterpret_cast<const uint8_t*>(f.data()), f.size()});
    decode_frames(views, max_bytes);
    return frames;
}

std::string encode(std::string_view topic, const Value& body, uint64_t seq, std::string_view src,
                   const Stamps& stamps, size_t max_bytes) {
    return encode_frames(topic, body, seq, src, stamps, SIZE_MAX, max_bytes)[0];
}

}  // namespace rtinfer::wire
