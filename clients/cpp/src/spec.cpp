#include "rtinfer/spec.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include <msgpack.hpp>

#include "float_pack.hpp"

namespace rtinfer {

namespace {

using Packer = msgpack::packer<msgpack::sbuffer>;

void str(Packer& pk, const std::string& s) {
    pk.pack_str(uint32_t(s.size()));
    pk.pack_str_body(s.data(), uint32_t(s.size()));
}
void strs(Packer& pk, const std::vector<std::string>& v) {
    pk.pack_array(uint32_t(v.size()));
    for (const auto& s : v) str(pk, s);
}
void reals(msgpack::sbuffer& buf, Packer& pk, const std::vector<double>& v) {
    pk.pack_array(uint32_t(v.size()));
    for (double x : v) detail::pack_float64(buf, x);  // always 0xcb, even for 0.0
}

std::vector<double> read_reals(const json::Value& v, const char* key) {
    std::vector<double> out;
    for (const auto& x : v.at(key).items) {
        if (x.kind != json::Value::Kind::Number) throw std::runtime_error(std::string(key) + " must hold numbers");
        out.push_back(x.num);
    }
    return out;
}
std::vector<std::string> read_strs(const json::Value& v, const char* key) {
    std::vector<std::string> out;
    for (const auto& x : v.at(key).items) {
        if (x.kind != json::Value::Kind::String) throw std::runtime_error(std::string(key) + " must hold strings");
        out.push_back(x.text);
    }
    return out;
}

void check_limits(const std::vector<std::string>& names, const std::vector<double>& low,
                  const std::vector<double>& high, const char* what) {
    if (names.empty() || low.size() != names.size() || high.size() != names.size())
        throw std::runtime_error(std::string(what) + ": low/high need one value per name");
    for (size_t k = 0; k < low.size(); ++k)
        if (!std::isfinite(low[k]) || !std::isfinite(high[k]) || !(low[k] < high[k]))
            throw std::runtime_error(std::string(what) + ": every dimension needs finite low < high");
}

void check_hash(const json::Value& v, const std::string& computed, const char* what) {
    const json::Value* h = v.get("hash");
    if (h && h->text != computed)
        throw std::runtime_error(std::string(what) + " hash " + h->text + " does not match its content (" +
                                 computed + "): the file was edited or is corrupt");
}

}  // namespace

std::string TokenizerConfig::canonical_bytes() const {
    msgpack::sbuffer buf;
    Packer pk(buf);
    pk.pack_map(6);  // keys sorted by their UTF-8 bytes
    str(pk, "bins"); pk.pack_uint64(bins);
    str(pk, "high"); reals(buf, pk, high);
    str(pk, "horizon"); pk.pack_uint64(horizon);
    str(pk, "low"); reals(buf, pk, low);
    str(pk, "names"); strs(pk, names);
    str(pk, "period_ns"); pk.pack_uint64(period_ns);
    return std::string(buf.data(), buf.size());
}

std::string TokenizerConfig::hash() const { return sha256_hex(canonical_bytes()).substr(0, 16); }

TokenizerConfig TokenizerConfig::from_json(const json::Value& v) {
    for (const auto& kv : v.obj)
        if (kv.first != "low" && kv.first != "high" && kv.first != "bins" && kv.first != "horizon" &&
            kv.first != "names" && kv.first != "period_ns" && kv.first != "hash")
            throw std::runtime_error("unknown tokenizer config key " + kv.first);
    TokenizerConfig c;
    c.low = read_reals(v, "low");
    c.high = read_reals(v, "high");
    if (v.get("names")) c.names = read_strs(v, "names");
    if (v.get("bins")) c.bins = v.at("bins").uinteger();
    if (v.get("horizon")) c.horizon = v.at("horizon").uinteger();
    if (v.get("period_ns")) c.period_ns = v.at("period_ns").uinteger();
    check_limits(c.names, c.low, c.high, "tokenizer config");
    if (c.bins < 2 || c.horizon < 1 || c.period_ns < 1)
        throw std::runtime_error("tokenizer config: need bins >= 2, horizon >= 1 and period_ns > 0");
    check_hash(v, c.hash(), "tokenizer config");
    return c;
}

std::string ActionSpec::canonical_bytes() const {
    msgpack::sbuffer buf;
    Packer pk(buf);
    pk.pack_map(max_committed ? 8 : 7);  // keys sorted by their UTF-8 bytes
    str(pk, "high"); reals(buf, pk, high);
    str(pk, "horizon"); pk.pack_uint64(horizon);
    str(pk, "low"); reals(buf, pk, low);
    if (max_committed) { str(pk, "max_committed"); pk.pack_uint64(*max_committed); }
    str(pk, "names"); strs(pk, names);
    str(pk, "period_ns"); pk.pack_uint64(period_ns);
    str(pk, "start_ns"); pk.pack_uint64(start_ns);
    str(pk, "units"); strs(pk, units);
    return std::string(buf.data(), buf.size());
}

std::string ActionSpec::hash() const { return sha256_hex(canonical_bytes()).substr(0, 16); }

ActionSpec ActionSpec::from_json(const json::Value& v) {
    const json::Value* fmt = v.get("format");
    if (fmt && fmt->text != "rtinfer-action-spec") throw std::runtime_error("not an rtinfer-action-spec document");
    ActionSpec a;
    a.names = read_strs(v, "names");
    a.units = read_strs(v, "units");
    a.low = read_reals(v, "low");
    a.high = read_reals(v, "high");
    a.horizon = v.at("horizon").uinteger();
    a.period_ns = v.at("period_ns").uinteger();
    a.start_ns = v.at("start_ns").uinteger();
    if (v.get("max_committed")) a.max_committed = v.at("max_committed").uinteger();
    check_limits(a.names, a.low, a.high, "action spec");
    if (a.units.size() != a.names.size()) throw std::runtime_error("action spec: one unit per name");
    if (a.horizon < 1 || a.period_ns < 1) throw std::runtime_error("action spec: horizon and period_ns must be >= 1");
    check_hash(v, a.hash(), "action spec");
    return a;
}

// ---- SHA-256 (FIPS 180-4) -------------------------------------------------------------
namespace {
constexpr uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
}  // namespace

std::string sha256_hex(const std::string& data) {
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                     0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    std::string m = data;
    uint64_t bits = uint64_t(data.size()) * 8;
    m.push_back(char(0x80));
    while (m.size() % 64 != 56) m.push_back('\0');
    for (int k = 7; k >= 0; --k) m.push_back(char((bits >> (8 * k)) & 0xff));
    for (size_t off = 0; off < m.size(); off += 64) {
        uint32_t w[64];
        for (int t = 0; t < 16; ++t) {
            const auto* p = reinterpret_cast<const unsigned char*>(m.data() + off + 4 * t);
            w[t] = uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
        }
        for (int t = 16; t < 64; ++t) {
            uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
            uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
            w[t] = w[t - 16] + s0 + w[t - 7] + s1;
        }
        uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
        for (int t = 0; t < 64; ++t) {
            uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[t] + w[t];
            uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
        }
        h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
    }
    static const char* hex = "0123456789abcdef";
    std::string out;
    for (uint32_t x : h)
        for (int k = 28; k >= 0; k -= 4) out.push_back(hex[(x >> k) & 0xf]);
    return out;
}

}  // namespace rtinfer
