// rtinfer wire protocol, schema version 2 (docs/wire.md): decode and encode envelopes.
//
//   auto env = rtinfer::wire::decode(bytes, n);            // single frame
//   auto env = rtinfer::wire::decode_frames(frames);        // [envelope, *array frames]
//   auto frames = rtinfer::wire::encode_frames("trace", body, seq, "ctl", stamps);
//
// Every decoding failure, whatever the bytes, throws rtinfer::wire::WireError whose kind()
// is the reference decoder's error class (OversizeError, MalformedError, ...). Decoded
// strings and arrays are views into the caller's buffers: keep them alive while the
// Envelope is used. Functions are reentrant and never block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rtinfer::wire {

constexpr int SCHEMA_VERSION = 2;
constexpr size_t DEFAULT_MAX_BYTES = 4 * 1024 * 1024;
constexpr size_t MAX_STR_BYTES = 65536;
constexpr size_t MAX_MAP_LEN = 4096;
constexpr int MAX_DEPTH = 1024;  // nested maps/arrays the parser takes (the reference's)
constexpr int MAX_NDIM = 8;
constexpr size_t MAX_NAME_CHARS = 128;
constexpr int64_t I64_MAX = INT64_MAX;

enum class ErrorKind { Oversize, Malformed, Version, Topic, Schema, Array };

// The reference decoder's class name for a kind ("MalformedError", ...).
const char* error_class(ErrorKind k);

class WireError : public std::runtime_error {
  public:
    WireError(ErrorKind kind, const std::string& msg, std::string path = "")
        : std::runtime_error(path.empty() ? msg : path + ": " + msg), kind_(kind),
          path_(std::move(path)) {}
    ErrorKind kind() const { return kind_; }
    const std::string& path() const { return path_; }  // e.g. "body.values" (Schema/Array)
    bool is_schema() const { return kind_ == ErrorKind::Schema || kind_ == ErrorKind::Array; }

  private:
    ErrorKind kind_;
    std::string path_;
};

// dtype codes of the array ext types (docs/wire.md section 4). The code is the index.
enum class DType : uint8_t { Bool, I8, I16, I32, I64, U8, U16, U32, U64, F16, F32, F64 };
constexpr int N_DTYPES = 12;
size_t itemsize(DType d);
const char* dtype_name(DType d);  // numpy's names: "float32", "bool", ...
bool is_float(DType d);
bool is_integer(DType d);  // codes 1..8

// An ndarray: a view of little-endian, C-order, packed data.
struct NdArray {
    DType dtype = DType::F32;
    std::vector<uint64_t> dims;
    const uint8_t* data = nullptr;
    size_t nbytes = 0;

    uint64_t size() const;             // elements (1 for ndim 0)
    double real(size_t i) const;       // element i as a double (any dtype)
    int64_t integer(size_t i) const;   // element i of an integer array (u64 > I64_MAX clips)
    bool integer_in(size_t i, int64_t lo, int64_t hi) const;  // exact, any integer dtype
};

struct Entry;

// One msgpack item as the strict subset of docs/wire.md section 1 allows it, plus the
// forbidden ones the parser lets through (nil, bool, empty bin/array, timestamp) so that
// the schema can reject them with the reference's error class.
struct Value {
    enum class Kind { Nil, Bool, Int, Float, Str, Bin, List, Map, Array, Timestamp };
    Kind kind = Kind::Nil;
    bool b = false;         // Bool
    bool neg = false;       // Int: negative (then i holds it), else u
    uint64_t u = 0;
    int64_t i = 0;
    double f = 0;           // Float
    bool f32 = false;       // Float: encoded as float32
    std::string_view s;     // Str (UTF-8), Bin
    std::vector<Entry> map; // Map, in wire order
    NdArray arr;            // Array (ext 1 or 2)

    static Value integer(int64_t v);
    static Value uinteger(uint64_t v);
    static Value real(double v);
    static Value str(std::string_view v);
    static Value ndarray(DType d, std::vector<uint64_t> dims, const void* data, size_t nbytes);
    static Value object(std::vector<Entry> entries);

    bool is_int() const { return kind == Kind::Int; }
    const Value* get(std::string_view key) const;  // Map lookup by str key; nullptr if absent
};

struct Entry {
    Value key;  // Str, or an (empty) Bin: the reference decodes both as map keys
    Value value;
};

using Stamps = std::vector<std::pair<std::string, int64_t>>;  // ordered, name -> ns

// Set `name` in ordered stamps: an existing name keeps its position (Python dict rules).
void set_stamp(Stamps& st, std::string_view name, int64_t ns);
std::optional<int64_t> get_stamp(const Stamps& st, std::string_view name);

struct Envelope {
    int version = SCHEMA_VERSION;
    std::string topic;
    uint64_t seq = 0;
    std::string src;
    Stamps stamps;
    Value body;  // a Map; views into the decoded buffer
    std::string_view kind() const;  // the topic before the first '/'
};

struct Frame {
    const uint8_t* data;
    size_t size;
};

// Decode one single-frame message. topics: when non-empty, the accepted topic set.
Envelope decode(const uint8_t* data, size_t size, size_t max_bytes = DEFAULT_MAX_BYTES,
                const std::vector<std::string>& topics = {});
// Decode [envelope, *out-of-band frames] (a multipart message minus its topic frame).
Envelope decode_frames(const std::vector<Frame>& frames, size_t max_bytes = DEFAULT_MAX_BYTES,
                       const std::vector<std::string>& topics = {});

// Check a body against the schema of `topic`'s kind (TopicError/SchemaError/ArrayError).
void validate_body(std::string_view topic, const Value& body);
bool valid_name(std::string_view v);

// Encode: validates like decode (a message that encodes always decodes), then packs the
// envelope with msgpack-c. Arrays of >= oob_bytes go out of band (frames 1..N, copied).
std::vector<std::string> encode_frames(std::string_view topic, const Value& body, uint64_t seq,
                                       std::string_view src, const Stamps& stamps,
                                       size_t oob_bytes = 65536,
                                       size_t max_bytes = DEFAULT_MAX_BYTES);
std::string encode(std::string_view topic, const Value& body, uint64_t seq,
                   std::string_view src, const Stamps& stamps,
                   size_t max_bytes = DEFAULT_MAX_BYTES);

// CLOCK_MONOTONIC in nanoseconds: the one clock for stamps.
int64_t now_ns();

}  // namespace rtinfer::wire
