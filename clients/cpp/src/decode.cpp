// The strict msgpack parser and the envelope checks of docs/wire.md, in the reference
// decoder's order (section 9), so that each failure has the reference's error class.
#include <cmath>
#include <cstring>
#include <ctime>

#include <algorithm>

#include "rtinfer/wire.hpp"

namespace rtinfer::wire {

namespace {

[[noreturn]] void malformed(const std::string& why) {
    throw WireError(ErrorKind::Malformed, why + ": check the sender speaks docs/wire.md");
}
[[noreturn]] void array_error(const std::string& why) { throw WireError(ErrorKind::Array, why); }

uint64_t be(const uint8_t* p, int n) {
    uint64_t v = 0;
    for (int k = 0; k < n; ++k) v = (v << 8) | p[k];
    return v;
}
uint64_t le64(const uint8_t* p) {
    uint64_t v = 0;
    for (int k = 7; k >= 0; --k) v = (v << 8) | p[k];
    return v;
}

// Strict UTF-8 (as Python decodes it): no overlongs, no surrogates, nothing past U+10FFFF.
bool valid_utf8(const uint8_t* s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) { ++i; continue; }
        int len;
        uint32_t lo = 0x80, hi = 0xBF;  // bounds of the second byte
        if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c == 0xE0) { len = 3; lo = 0xA0; }
        else if (c == 0xED) { len = 3; hi = 0x9F; }
        else if (c >= 0xE1 && c <= 0xEF) len = 3;
        else if (c == 0xF0) { len = 4; lo = 0x90; }
        else if (c >= 0xF1 && c <= 0xF3) len = 4;
        else if (c == 0xF4) { len = 4; hi = 0x8F; }
        else return false;
        if (n - i < size_t(len)) return false;
        if (s[i + 1] < lo || s[i + 1] > hi) return false;
        for (int k = 2; k < len; ++k)
            if ((s[i + k] & 0xC0) != 0x80) return false;
        i += len;
    }
    return true;
}

// Array ext header (section 4): dtype, dims, header size; everything but the data.
void parse_header(const uint8_t* d, size_t n, DType& dtype, std::vector<uint64_t>& dims,
                  size_t& off) {
    size_t ndim = n >= 8 ? d[1] : 0;
    if (n < 8 + 8 * ndim || ndim > MAX_NDIM)
        array_error("array ext payload of " + std::to_string(n) + " bytes with ndim " +
                    std::to_string(ndim) + " is malformed: the header needs 8 + 8*ndim bytes "
                    "and ndim must be <= 8");
    bool reserved = false;
    for (int k = 2; k < 8; ++k) reserved |= d[k] != 0;
    if (d[0] >= N_DTYPES || reserved)
        array_error("array dtype code " + std::to_string(d[0]) + " is not on the allow-list "
                    "(0..11) or header bytes 2..7 are not zero");
    dtype = DType(d[0]);
    dims.resize(ndim);
    for (size_t k = 0; k < ndim; ++k) dims[k] = le64(d + 8 + 8 * k);
    off = 8 + 8 * ndim;
}

// The data of one array: its length, the bool bytes, and the size numpy can represent.
void check_data(NdArray& a, const uint8_t* data, size_t nbytes, const std::string& where) {
    bool zero = false, overflow = false;
    uint64_t nonzero = itemsize(a.dtype);  // bytes the non-zero dims span
    for (uint64_t d : a.dims) {
        if (d == 0) zero = true;
        else if (__builtin_mul_overflow(nonzero, d, &nonzero)) overflow = true;
    }
    uint64_t want = zero ? 0 : nonzero;
    if (!zero && overflow)
        array_error(where + " holds " + std::to_string(nbytes) + " bytes but its header "
                    "declares more than any message can hold");
    if (want != nbytes)
        array_error(where + " holds " + std::to_string(nbytes) + " bytes but dtype " +
                    dtype_name(a.dtype) + " x its shape needs " + std::to_string(want));
    // An empty array whose other dims multiply past 2**63-1 bytes: the reference (numpy)
    // cannot represent it and rejects it as malformed.
    for (uint64_t d : a.dims)
        if (d > uint64_t(I64_MAX)) overflow = true;
    if (a.dims.size() >= 2 && (overflow || nonzero > uint64_t(I64_MAX)))
        malformed("empty array of shape too large to represent");
    if (a.dtype == DType::Bool)
        for (size_t k = 0; k < nbytes; ++k)
            if (data[k] > 1) array_error("bool array holds bytes other than 0 and 1");
    a.data = data;
    a.nbytes = nbytes;
}

class Parser {
  public:
    Parser(const uint8_t* p, size_t n, const std::vector<Frame>* frames)
        : p_(p), end_(p + n), frames_(frames) {
        if (frames) used_.assign(frames->size(), false);
    }

    void parse_all(Value& out) {
        item(out, 0);
        if (p_ != end_) malformed("trailing bytes after the message");
        if (frames_) {
            for (size_t k = 1; k < used_.size(); ++k)
                if (!used_[k])
                    malformed("frame " + std::to_string(k) + " is not referenced by the "
                              "envelope: every frame after the envelope must carry one array");
        }
    }

  private:
    const uint8_t* p_;
    const uint8_t* end_;
    const std::vector<Frame>* frames_;
    std::vector<bool> used_;

    const uint8_t* take(size_t n) {
        if (size_t(end_ - p_) < n) malformed("truncated message");
        const uint8_t* at = p_;
        p_ += n;
        return at;
    }
    uint64_t num(int n) { return be(take(n), n); }

    void item(Value& v, int depth) {
        uint8_t c = *take(1);
        if (c <= 0x7f) return set_uint(v, c);
        if (c >= 0xe0) return set_int(v, int8_t(c));
        if ((c & 0xf0) == 0x80) return map(v, c & 0x0f, depth);
        if ((c & 0xf0) == 0x90) return list(v, c & 0x0f, depth);
        if ((c & 0xe0) == 0xa0) return str(v, c & 0x1f);
        switch (c) {
            case 0xc0: v.kind = Value::Kind::Nil; return;
            case 0xc2: case 0xc3: v.kind = Value::Kind::Bool; v.b = c == 0xc3; return;
            case 0xc4: return bin(v, num(1));
            case 0xc5: return bin(v, num(2));
            case 0xc6: return bin(v, num(4));
            case 0xc7: { size_t n = num(1); return ext(v, n); }
            case 0xc8: { size_t n = num(2); return ext(v, n); }
            case 0xc9: { size_t n = num(4); return ext(v, n); }
            case 0xca: {
                uint32_t bits = uint32_t(num(4));
                float f;
                std::memcpy(&f, &bits, 4);
                v.kind = Value::Kind::Float; v.f = f; v.f32 = true;
                return;
            }
            case 0xcb: {
                uint64_t bits = num(8);
                std::memcpy(&v.f, &bits, 8);
                v.kind = Value::Kind::Float; v.f32 = false;
                return;
            }
            case 0xcc: return set_uint(v, num(1));
            case 0xcd: return set_uint(v, num(2));
            case 0xce: return set_uint(v, num(4));
            case 0xcf: return set_uint(v, num(8));
            case 0xd0: return set_int(v, int8_t(num(1)));
            case 0xd1: return set_int(v, int16_t(num(2)));
            case 0xd2: return set_int(v, int32_t(num(4)));
            case 0xd3: return set_int(v, int64_t(num(8)));
            case 0xd4: return ext(v, 1);
            case 0xd5: return ext(v, 2);
            case 0xd6: return ext(v, 4);
            case 0xd7: return ext(v, 8);
            case 0xd8: return ext(v, 16);
            case 0xd9: return str(v, num(1));
            case 0xda: return str(v, num(2));
            case 0xdb: return str(v, num(4));
            case 0xdc: return list(v, num(2), depth);
            case 0xdd: return list(v, num(4), depth);
            case 0xde: return map(v, num(2), depth);
            case 0xdf: return map(v, num(4), depth);
            default: malformed("byte 0xc1 is never used in msgpack");
        }
    }

    static void set_uint(Value& v, uint64_t u) { v.kind = Value::Kind::Int; v.neg = false; v.u = u; }
    static void set_int(Value& v, int64_t i) {
        if (i >= 0) return set_uint(v, uint64_t(i));
        v.kind = Value::Kind::Int; v.neg = true; v.i = i;
    }

    void str(Value& v, size_t n) {
        if (n > MAX_STR_BYTES) malformed("a str is over 65536 bytes");
        const uint8_t* s = take(n);
        if (!valid_utf8(s, n)) malformed("a str is not valid UTF-8");
        v.kind = Value::Kind::Str;
        v.s = std::string_view(reinterpret_cast<const char*>(s), n);
    }

    void bin(Value& v, size_t n) {
        if (n > 0) malformed("msgpack bin is not used on the wire (arrays are ext types)");
        v.kind = Value::Kind::Bin;
        v.s = {};
    }

    void list(Value& v, size_t n, int depth) {
        if (depth >= MAX_DEPTH) malformed("nesting deeper than 1024 containers");
        if (n > 0) malformed("msgpack arrays are not used on the wire (shapes live in ext types)");
        v.kind = Value::Kind::List;
    }

    void map(Value& v, size_t n, int depth) {
        if (depth >= MAX_DEPTH) malformed("nesting deeper than 1024 containers");
        if (n > MAX_MAP_LEN) malformed("a map has over 4096 entries");
        v.kind = Value::Kind::Map;
        v.map.reserve(std::min(n, size_t(end_ - p_) / 2));  // an entry is >= 2 bytes
        for (size_t k = 0; k < n; ++k) {
            Entry& e = v.map.emplace_back();
            item(e.key, depth + 1);
            item(e.value, depth + 1);
            // like the reference: a key's type is checked once its value is parsed
            if (e.key.kind != Value::Kind::Str && e.key.kind != Value::Kind::Bin)
                malformed("a map key is not a str");
        }
        for (size_t a = 1; a < n; ++a)
            for (size_t b = 0; b < a; ++b)
                if (v.map[a].key.kind == v.map[b].key.kind && v.map[a].key.s == v.map[b].key.s)
                    malformed("a map repeats a key: every key may appear only once");
    }

    void ext(Value& v, size_t n) {
        int8_t code = int8_t(*take(1));
        const uint8_t* d = take(n);
        if (code == 1) {
            v.kind = Value::Kind::Array;
            size_t off;
            parse_header(d, n, v.arr.dtype, v.arr.dims, off);
            check_data(v.arr, d + off, n - off, "inline array");
            return;
        }
        if (code == 2) {
            if (!frames_)
                malformed("out-of-band array (ext 2) in a single-frame message");
            v.kind = Value::Kind::Array;
            size_t off;
            parse_header(d, n, v.arr.dtype, v.arr.dims, off);
            if (n != off + 8)
                array_error("out-of-band array ext is " + std::to_string(n) + " bytes: expected " +
                            std::to_string(off + 8));
            uint64_t index = le64(d + off);
            if (index < 1 || index >= frames_->size() || used_[index])
                malformed("out-of-band array references frame " + std::to_string(index) +
                          ": must be an unused frame in 1.." + std::to_string(frames_->size() - 1));
            used_[index] = true;
            const Frame& f = (*frames_)[index];
            check_data(v.arr, f.data, f.size, "frame " + std::to_string(index));
            return;
        }
        if (code == -1) {  // msgpack's timestamp: decodes if well formed, then fails the schema
            uint64_t nsec = 0;
            if (n == 8) nsec = be(d, 8) >> 34;
            else if (n == 12) nsec = be(d, 4);
            else if (n != 4) malformed("malformed msgpack timestamp");
            if (nsec > 999999999) malformed("malformed msgpack timestamp");
            v.kind = Value::Kind::Timestamp;
            return;
        }
        malformed("unknown msgpack ext type " + std::to_string(code) + ": rtinfer uses only 1 and 2");
    }
};

// ---- the schema (docs/wire.md sections 3 and 5) -------------------------------------------

[[noreturn]] void schema(const std::string& why, const std::string& path = "") {
    throw WireError(ErrorKind::Schema, why, path);
}

// Prepend a path component to a schema error (as the reference's SchemaError.at).
template <class F>
void at(const std::string& prefix, F&& f) {
    try {
        f();
    } catch (const WireError& e) {
        if (!e.is_schema()) throw;
        std::string msg = e.what();
        std::string problem = e.path().empty() ? msg : msg.substr(e.path().size() + 2);
        throw WireError(e.kind(), problem, prefix + e.path());
    }
}

bool int_in(const Value& v, int64_t lo, uint64_t hi) {
    if (v.kind != Value::Kind::Int) return false;
    if (v.neg) return lo < 0 && v.i >= lo;
    return (lo <= 0 || v.u >= uint64_t(lo)) && v.u <= hi;
}

void check_int(const Value& v, int64_t lo, uint64_t hi, const char* rule) {
    if (v.kind != Value::Kind::Int)
        schema(std::string("must be an integer ") + rule + "; send a plain int (bool is not an int)");
    if (!int_in(v, lo, hi)) schema(std::string("out of range: must be an integer ") + rule);
}
void u64(const Value& v) { check_int(v, 0, UINT64_MAX, "in [0, 2**64-1]"); }
void i64(const Value& v) { check_int(v, INT64_MIN, uint64_t(I64_MAX), "in [-2**63, 2**63-1]"); }
void ns(const Value& v) { check_int(v, 0, uint64_t(I64_MAX), "in [0, 2**63-1] (monotonic ns)"); }

void check_real(const Value& v) {
    if (v.kind == Value::Kind::Float) {
        if (!std::isfinite(v.f)) schema("is not finite: NaN and inf are rejected");
    } else if (v.kind != Value::Kind::Int) {
        schema("must be a finite float");
    }
}

void check_str(const Value& v) {
    if (v.kind != Value::Kind::Str) schema("must be a string");
}

void check_name(const Value& v) {
    check_str(v);
    if (!valid_name(v.s))
        schema("is not a valid name: use 1..128 printable ASCII characters without spaces");
}

std::string key_text(const Value& k) { return "['" + std::string(k.s.substr(0, 40)) + "']"; }

template <class F>
void check_map(const Value& v, F&& value_check) {
    if (v.kind != Value::Kind::Map) schema("must be a map");
    for (const auto& e : v.map) {
        if (e.key.kind != Value::Kind::Str) schema("map keys must be strings");
        at(key_text(e.key), [&] { value_check(e.value); });
    }
}

void check_array(const Value& v, int kind, int ndim, bool nonempty) {
    // kind: 0 any allow-listed dtype, 1 float32 only, 2 integer dtypes only, 3 uint8 only
    if (v.kind != Value::Kind::Array) array_error("must be an ndarray");
    const NdArray& a = v.arr;
    if (kind == 1 && a.dtype != DType::F32)
        array_error(std::string("dtype ") + dtype_name(a.dtype) + " is not allowed here: must be float32");
    if (kind == 3 && a.dtype != DType::U8)
        array_error(std::string("dtype ") + dtype_name(a.dtype) + " is not allowed here: must be uint8");
    if (kind == 2 && !is_integer(a.dtype))
        array_error(std::string("dtype ") + dtype_name(a.dtype) + " is not allowed here: must be an integer dtype");
    if (ndim >= 0 && int(a.dims.size()) != ndim)
        array_error("has " + std::to_string(a.dims.size()) + " dims: must have " + std::to_string(ndim));
    if (nonempty && a.size() == 0) array_error("is empty: must hold at least one element");
    if (is_float(a.dtype))
        for (uint64_t k = 0, n = a.size(); k < n; ++k)
            if (!std::isfinite(a.real(k)))
                array_error("contains NaN or inf: only finite floats are accepted");
}

struct Field {
    const char* name;
    void (*check)(const Value&);
    bool optional;
};

void values_array(const Value& v) { check_array(v, 1, 1, true); }
void tokens_array(const Value& v) { check_array(v, 2, 1, true); }
void any_array(const Value& v) { check_array(v, 0, -1, false); }
void obs_values(const Value& v) { check_map(v, any_array); }
void obs_ints(const Value& v) { check_map(v, i64); }
void count_field(const Value& v) { check_int(v, 1, UINT64_MAX, ">= 1"); }
void positive_ns(const Value& v) { check_int(v, 1, uint64_t(I64_MAX), "in [1, 2**63-1] (ns)"); }
void level_field(const Value& v) { check_int(v, 0, uint64_t(I64_MAX), ">= 0"); }
void stamps_field(const Value& v) { check_map(v, ns); }
void u64_map(const Value& v) { check_map(v, u64); }
void real_map(const Value& v) { check_map(v, check_real); }
void command_field(const Value& v) {
    check_str(v);
    if (v.s != "safe_hold" && v.s != "clear" && v.s != "stop")
        schema("is not a command: must be one of ['clear', 'safe_hold', 'stop']");
}

void validate_fields(const std::vector<Field>& fields, const Value& body, const std::string& where);

void frame_image(const Value& v) { check_array(v, 3, 3, true); }  // uint8 [H, W, C]
const std::vector<Field> FRAME = {{"image", frame_image, false}, {"capture_ns", ns, false}};
void obs_frames(const Value& v) {  // camera name -> frame, at least one (section 5)
    if (v.kind != Value::Kind::Map || v.map.empty())
        schema("must be a non-empty map of camera name -> frame; leave `frames` out when there are none");
    for (const auto& e : v.map) {
        at(key_text(e.key), [&] { check_name(e.key); });
        validate_fields(FRAME, e.value, key_text(e.key));
    }
}

const std::vector<Field> ECHO = {
    {"src", check_name, false}, {"seq", u64, false}, {"sent_ns", ns, false}, {"recv_ns", ns, false}};
void echo_field(const Value& v) { validate_fields(ECHO, v, ""); }

// real-time chunking (section 5): an obs's committed prefix, a chunk's `conditioned`
void committed_values(const Value& v) { check_array(v, 1, 2, true); }  // float32 (n, D)
const std::vector<Field> COMMITTED = {{"chunk", u64, false}, {"from", u64, false},
                                      {"values", committed_values, false}, {"start_ns", ns, false}};
void committed_field(const Value& v) { validate_fields(COMMITTED, v, ""); }
void prefix_hash_field(const Value& v) {
    check_str(v);
    bool hex = v.s.size() == 16;
    for (char c : v.s) hex &= (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    if (!hex) schema("is not a prefix hash: must be 16 lowercase hex digits");
}
const std::vector<Field> CONDITIONED = {{"chunk", u64, false}, {"from", u64, false},
                                        {"n", count_field, false}, {"hash", prefix_hash_field, false}};
void conditioned_field(const Value& v) { validate_fields(CONDITIONED, v, ""); }

struct BodySpec {
    const char* kind;
    std::vector<Field> fields;
};

const std::vector<BodySpec>& bodies() {
    static const std::vector<BodySpec> specs = {
        {"obs", {{"values", obs_values, false}, {"ints", obs_ints, false}, {"frames", obs_frames, true},
                 {"committed", committed_field, true}, {"open_loop_ns", positive_ns, true}}},
        {"action_chunk", {{"cycle", u64, false}, {"index", u64, false}, {"count", count_field, false},
                          {"dest", check_name, false}, {"values", values_array, false},
                          {"tokens", tokens_array, true}, {"spec", check_str, false},
                          {"period_ns", positive_ns, false}, {"start_ns", ns, false},
                          {"conditioned", conditioned_field, true}, {"executes", count_field, true},
                          {"obs_period_ns", positive_ns, true}}},
        {"heartbeat", {{"node", check_name, false}, {"sent_ns", ns, false}, {"echo", echo_field, true}}},
        {"health", {{"node", check_name, false}, {"state", check_str, false},
                    {"counters", u64_map, false}, {"gauges", real_map, false}}},
        {"budget", {{"level", level_field, false}, {"reason", check_str, false}}},
        {"command", {{"cmd", command_field, false}, {"reason", check_str, false}}},
        {"trace", {{"node", check_name, false}, {"cycle", u64, false}, {"stamps", stamps_field, false},
                   {"fields", real_map, false}}},
    };
    return specs;
}

void validate_fields(const std::vector<Field>& fields, const Value& body, const std::string& where) {
    if (body.kind != Value::Kind::Map) schema("must be a map", where);
    for (const auto& e : body.map) {  // unknown keys before missing ones
        bool known = false;
        for (const auto& f : fields) known |= e.key.kind == Value::Kind::Str && e.key.s == f.name;
        if (!known) schema("unknown field '" + std::string(e.key.s.substr(0, 40)) + "'", where);
    }
    for (const auto& f : fields)
        if (!f.optional && !body.get(f.name))
            schema(std::string("missing field '") + f.name + "'", where);
    for (const auto& e : body.map)
        for (const auto& f : fields)
            if (e.key.s == f.name) at(where + "." + f.name, [&] { f.check(e.value); });
}

void chunk_cross(const Value& body) {
    const Value& index = *body.get("index");
    const Value& count = *body.get("count");
    if (index.u >= count.u) schema("out of range: must be < count", "body.index");
    const Value* tokens = body.get("tokens");
    if (tokens && tokens->arr.dims != body.get("values")->arr.dims)
        throw WireError(ErrorKind::Array, "tokens shape differs from values shape: both must be (D,)",
                        "body.tokens");
    const Value* executes = body.get("executes");  // an executed horizon within its chunk
    if (executes && executes->u > count.u) schema("out of range: must be <= count", "body.executes");
}

void heartbeat_cross(const Value& body) {
    const Value* echo = body.get("echo");
    if (echo && echo->get("recv_ns")->u > body.get("sent_ns")->u)
        schema("is after the echo's sent_ns: a node answers a ping after it received it, on one "
               "clock", "body.echo.recv_ns");
}

// The rules between fields of one body, after every field passed its own (section 9, step 10).
void cross_fields(std::string_view kind, const Value& body) {
    if (kind == "action_chunk") chunk_cross(body);
    else if (kind == "heartbeat") heartbeat_cross(body);
}

const BodySpec& body_spec(std::string_view topic) {
    std::string_view kind = topic.substr(0, topic.find('/'));
    for (const auto& b : bodies())
        if (kind == b.kind) return b;
    throw WireError(ErrorKind::Topic, "unknown topic '" + std::string(topic.substr(0, 40)) +
                    "': the topic (before any '/') must be one of action_chunk, budget, command, "
                    "health, heartbeat, obs, trace");
}

void check_fields(const Value& topic, const Value& seq, const Value& src, const Value& stamps,
                  const Value& body, const std::vector<std::string>& topics) {
    at("topic", [&] { check_name(topic); });
    at("seq", [&] { u64(seq); });
    at("src", [&] { check_name(src); });
    at("stamps", [&] { stamps_field(stamps); });
    if (!topics.empty()) {
        bool ok = false;
        for (const auto& t : topics) ok |= t == topic.s;
        if (!ok)
            throw WireError(ErrorKind::Topic, "topic '" + std::string(topic.s) +
                            "' is not one this receiver subscribed to");
    }
    const BodySpec& spec = body_spec(topic.s);
    validate_fields(spec.fields, body, "body");
    cross_fields(spec.kind, body);
}

const char* ENVELOPE_KEYS[] = {"version", "topic", "seq", "src", "stamps", "body"};

Envelope validate(Value&& top, const std::vector<std::string>& topics) {
    if (top.kind != Value::Kind::Map) malformed("the message must be a map (the envelope)");
    const Value* version = top.get("version");
    if (!version || !int_in(*version, SCHEMA_VERSION, SCHEMA_VERSION))
        throw WireError(ErrorKind::Version, "schema version is not supported (this receiver speaks 2): "
                        "run the same rtinfer release on both ends");
    bool exact = top.map.size() == 6;
    for (const char* k : ENVELOPE_KEYS) exact &= top.get(k) != nullptr;
    if (!exact)
        schema("envelope keys must be exactly ['version', 'topic', 'seq', 'src', 'stamps', 'body']",
               "envelope");
    const Value &topic = *top.get("topic"), &seq = *top.get("seq"), &src = *top.get("src"),
                &stamps = *top.get("stamps");
    Value* body_p = nullptr;
    for (auto& e : top.map)
        if (e.key.kind == Value::Kind::Str && e.key.s == "body") body_p = &e.value;
    Value& body = *body_p;
    check_fields(topic, seq, src, stamps, body, topics);
    Envelope env;
    env.topic = std::string(topic.s);
    env.seq = seq.u;
    env.src = std::string(src.s);
    for (const auto& e : stamps.map) env.stamps.emplace_back(std::string(e.key.s), int64_t(e.value.u));
    env.body = std::move(body);
    return env;
}

void check_size(size_t n, size_t max_bytes) {
    if (n > max_bytes)
        throw WireError(ErrorKind::Oversize, "message is " + std::to_string(n) + " bytes, over the " +
                        std::to_string(max_bytes) + "-byte limit: send less per message or raise "
                        "max_bytes on both ends");
}

}  // namespace

Envelope decode(const uint8_t* data, size_t size, size_t max_bytes,
                const std::vector<std::string>& topics) {
    check_size(size, max_bytes);
    Value top;
    Parser(data, size, nullptr).parse_all(top);
    return validate(std::move(top), topics);
}

Envelope decode_frames(const std::vector<Frame>& frames, size_t max_bytes,
                       const std::vector<std::string>& topics) {
    if (frames.size() == 1) return decode(frames[0].data, frames[0].size, max_bytes, topics);
    if (frames.empty()) malformed("no frames: a message has at least the envelope frame");
    size_t total = 0;
    for (const auto& f : frames) total += f.size;
    check_size(total, max_bytes);
    Value top;
    Parser(frames[0].data, frames[0].size, &frames).parse_all(top);
    return validate(std::move(top), topics);
}

void validate_body(std::string_view topic, const Value& body) {
    const BodySpec& spec = body_spec(topic);
    validate_fields(spec.fields, body, "body");
    cross_fields(spec.kind, body);
}

bool valid_name(std::string_view v) {
    if (v.empty() || v.size() > MAX_NAME_CHARS) return false;
    for (unsigned char c : v)
        if (c < 0x21 || c > 0x7e) return false;
    return true;
}

int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace rtinfer::wire
