// Values, arrays and stamps: the data model shared by the decoder and the encoder.
#include <cmath>
#include <cstring>

#include "rtinfer/wire.hpp"

namespace rtinfer::wire {

const char* error_class(ErrorKind k) {
    switch (k) {
        case ErrorKind::Oversize: return "OversizeError";
        case ErrorKind::Malformed: return "MalformedError";
        case ErrorKind::Version: return "VersionError";
        case ErrorKind::Topic: return "TopicError";
        case ErrorKind::Schema: return "SchemaError";
        case ErrorKind::Array: return "ArrayError";
    }
    return "WireError";
}

namespace {
constexpr size_t ITEMSIZE[N_DTYPES] = {1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 4, 8};
constexpr const char* NAMES[N_DTYPES] = {"bool",   "int8",   "int16",   "int32",
                                         "int64",  "uint8",  "uint16",  "uint32",
                                         "uint64", "float16", "float32", "float64"};

uint64_t load_le(const uint8_t* p, size_t n) {
    uint64_t v = 0;
    for (size_t k = n; k-- > 0;) v = (v << 8) | p[k];
    return v;
}

double half_to_double(uint16_t h) {
    int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double v;
    if (exp == 0) v = std::ldexp(mant, -24);
    else if (exp == 31) v = mant ? NAN : INFINITY;
    else v = std::ldexp(mant + 1024, exp - 25);
    return (h & 0x8000) ? -v : v;
}
}  // namespace

size_t itemsize(DType d) { return ITEMSIZE[int(d)]; }
const char* dtype_name(DType d) { return NAMES[int(d)]; }
bool is_float(DType d) { return d == DType::F16 || d == DType::F32 || d == DType::F64; }
bool is_integer(DType d) { return int(d) >= 1 && int(d) <= 8; }

uint64_t NdArray::size() const {
    uint64_t n = 1;
    for (uint64_t d : dims) n *= d;  // validated arrays: the product fits their byte length
    return n;
}

double NdArray::real(size_t i) const {
    const uint8_t* p = data + i * itemsize(dtype);
    uint64_t raw = load_le(p, itemsize(dtype));
    switch (dtype) {
        case DType::F16: return half_to_double(uint16_t(raw));
        case DType::F32: { uint32_t b = uint32_t(raw); float f; std::memcpy(&f, &b, 4); return f; }
        case DType::F64: { double f; std::memcpy(&f, &raw, 8); return f; }
        case DType::U64: return double(raw);
        default: return double(integer(i));
    }
}

int64_t NdArray::integer(size_t i) const {
    size_t n = itemsize(dtype);
    uint64_t raw = load_le(data + i * n, n);
    switch (dtype) {
        case DType::I8: return int8_t(raw);
        case DType::I16: return int16_t(raw);
        case DType::I32: return int32_t(raw);
        case DType::I64: return int64_t(raw);
        case DType::U64: return raw > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(raw);
        default: return int64_t(raw);  // bool, unsigned below 64 bits
    }
}

bool NdArray::integer_in(size_t i, int64_t lo, int64_t hi) const {
    if (dtype == DType::U64) {
        uint64_t raw = load_le(data + i * 8, 8);
        return raw <= uint64_t(INT64_MAX) && int64_t(raw) >= lo && int64_t(raw) <= hi;
    }
    int64_t v = integer(i);
    return v >= lo && v <= hi;
}

Value Value::integer(int64_t v) {
    Value x;
    x.kind = Kind::Int;
    if (v < 0) { x.neg = true; x.i = v; } else { x.u = uint64_t(v); }
    return x;
}
Value Value::uinteger(uint64_t v) { Value x; x.kind = Kind::Int; x.u = v; return x; }
Value Value::real(double v) { Value x; x.kind = Kind::Float; x.f = v; return x; }
Value Value::str(std::string_view v) { Value x; x.kind = Kind::Str; x.s = v; return x; }
Value Value::ndarray(DType d, std::vector<uint64_t> dims, const void* data, size_t nbytes) {
    Value x;
    x.kind = Kind::Array;
    x.arr.dtype = d;
    x.arr.dims = std::move(dims);
    x.arr.data = static_cast<const uint8_t*>(data);
    x.arr.nbytes = nbytes;
    return x;
}
Value Value::object(std::vector<Entry> entries) {
    Value x;
    x.kind = Kind::Map;
    x.map = std::move(entries);
    return x;
}

const Value* Value::get(std::string_view key) const {
    for (const auto& e : map)
        if (e.key.kind == Kind::Str && e.key.s == key) return &e.value;
    return nullptr;
}

std::string_view Envelope::kind() const {
    std::string_view t = topic;
    return t.substr(0, t.find('/'));
}

void set_stamp(Stamps& st, std::string_view name, int64_t ns) {
    for (auto& kv : st)
        if (kv.first == name) { kv.second = ns; return; }
    st.emplace_back(std::string(name), ns);
}

std::optional<int64_t> get_stamp(const Stamps& st, std::string_view name) {
    for (const auto& kv : st)
        if (kv.first == name) return kv.second;
    return std::nullopt;
}

}  // namespace rtinfer::wire
