// The C++ side of the shared tests (tests/test_cpp_client.py drives it; prints JSON).
//
//   rtinfer_wire_tool vectors DIR        decode every vector of DIR/manifest.json and run the
//                                        controller cases through ChunkRules
//   rtinfer_wire_tool fuzz N SEED FILE.. N mutations of each file: decode must reject with a
//                                        WireError or accept; anything else exits 2
//   rtinfer_wire_tool fuzz-dump N SEED FILE..  the same, one JSON line per decode (frames as
//                                        hex, verdict): for a differential test against Python
//   rtinfer_wire_tool encode OUTDIR      write one message of every kind for Python to decode
//   rtinfer_wire_tool hash FILE          content hash of a tokenizer.json / action_spec.json
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>

#include "rtinfer/controller.hpp"
#include "rtinfer/json.hpp"
#include "rtinfer/spec.hpp"
#include "rtinfer/wire.hpp"

using namespace rtinfer;
using wire::Value;

namespace {

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot read " + path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::string hex(const uint8_t* p, size_t n) {
    static const char* d = "0123456789abcdef";
    std::string out;
    for (size_t k = 0; k < n; ++k) { out.push_back(d[p[k] >> 4]); out.push_back(d[p[k] & 15]); }
    return out;
}

// The decoded form tests/vectors/README.md defines (the same as make_vectors.render).
std::string render(const Value& v) {
    switch (v.kind) {
        case Value::Kind::Int: return json::quote("i" + (v.neg ? std::to_string(v.i) : std::to_string(v.u)));
        case Value::Kind::Float: {
            uint64_t bits;
            std::memcpy(&bits, &v.f, 8);
            uint8_t be[8];
            for (int k = 0; k < 8; ++k) be[k] = uint8_t(bits >> (56 - 8 * k));
            return json::quote("f" + hex(be, 8));
        }
        case Value::Kind::Str: return json::quote("s" + std::string(v.s));
        case Value::Kind::Map: {
            std::string out = "{\"map\": [";
            for (size_t k = 0; k < v.map.size(); ++k)
                out += (k ? ", [" : "[") + json::quote(v.map[k].key.s) + ", " + render(v.map[k].value) + "]";
            return out + "]}";
        }
        case Value::Kind::Array: {
            std::string out = "{\"array\": [" + json::quote(wire::dtype_name(v.arr.dtype)) + ", [";
            for (size_t k = 0; k < v.arr.dims.size(); ++k)
                out += (k ? ", " : "") + json::quote(std::to_string(v.arr.dims[k]));
            return out + "], " + json::quote(hex(v.arr.data, v.arr.nbytes)) + "]}";
        }
        default: return "null";
    }
}

std::string render_envelope(const wire::Envelope& e) {
    std::string st = "[";
    for (size_t k = 0; k < e.stamps.size(); ++k)
        st += (k ? ", [" : "[") + json::quote(e.stamps[k].first) + ", " +
              json::quote(std::to_string(e.stamps[k].second)) + "]";
    return "{\"topic\": " + json::quote(e.topic) + ", \"seq\": " + json::quote(std::to_string(e.seq)) +
           ", \"src\": " + json::quote(e.src) + ", \"stamps\": " + st + "], \"body\": " + render(e.body) + "}";
}

struct Loaded {
    std::vector<std::string> bytes;
    std::vector<wire::Frame> frames;
};
Loaded load_frames(const std::string& dir, const json::Value& names) {
    Loaded l;
    for (const auto& n : names.items) l.bytes.push_back(read_file(dir + "/" + n.text));
    for (const auto& b : l.bytes) l.frames.push_back({reinterpret_cast<const uint8_t*>(b.data()), b.size()});
    return l;
}

int vectors(const std::string& dir) {
    json::Value m = json::parse_file(dir + "/manifest.json");
    std::cout << "{\"decode\": [\n";
    bool first = true;
    for (const auto& v : m.at("decode").items) {
        Loaded l = load_frames(dir, v.at("frames"));
        size_t max_bytes = v.get("max_bytes") ? v.at("max_bytes").uinteger() : wire::DEFAULT_MAX_BYTES;
        std::vector<std::string> topics;
        if (const json::Value* t = v.get("topics"))
            for (const auto& x : t->items) topics.push_back(x.text);
        std::string verdict = "ok", decoded = "null", why;
        try {
            wire::Envelope env = wire::decode_frames(l.frames, max_bytes, topics);
            decoded = render_envelope(env);
        } catch (const wire::WireError& e) {
            verdict = wire::error_class(e.kind());
            why = e.what();
        }
        std::cout << (first ? "" : ",\n") << "{\"name\": " << json::quote(v.at("name").text)
                  << ", \"verdict\": " << json::quote(verdict) << ", \"why\": " << json::quote(why)
                  << ", \"decoded\": " << decoded << "}";
        first = false;
    }
    std::cout << "],\n\"controller\": [\n";
    const json::Value& c = m.at("controller");
    const json::Value& cfgj = c.at("config");
    std::string root = dir + "/../..";
    ControllerConfig cfg;
    cfg.robot = cfgj.at("robot").text;
    cfg.name = cfgj.at("name").text;
    cfg.deadline_ns = cfgj.at("deadline_ns").integer();
    cfg.chunk_interval_ns = cfgj.at("chunk_interval_ns").integer();
    cfg.max_period_ns = cfgj.at("max_period_ns").integer();
    if (cfgj.get("open_loop_ns")) cfg.open_loop_ns = cfgj.at("open_loop_ns").integer();
    cfg.tokenizer = TokenizerConfig::from_json(json::parse_file(root + "/" + cfgj.at("tokenizer").text));
    cfg.action = ActionSpec::from_json(json::parse_file(root + "/" + cfgj.at("action").text));
    first = true;
    for (const auto& kase : c.at("cases").items) {
        ChunkRules rules(cfg);
        std::cout << (first ? "" : ",\n") << "{\"name\": " << json::quote(kase.at("name").text) << ", \"steps\": [";
        first = false;
        bool first_step = true;
        for (const auto& step : kase.at("steps").items) {
            int64_t now = step.at("now_ns").integer();
            Loaded l = load_frames(dir, step.at("frames"));
            if (!l.frames.empty()) {
                wire::Envelope env = wire::decode_frames(l.frames);
                wire::set_stamp(env.stamps, "recv", now);  // as the bus does
                if (env.topic == "action_chunk") rules.on_waypoint(env, now);
                else if (env.topic == "command") rules.on_command(std::string(env.body.get("cmd")->s), now);
            }
            rules.check_watchdog(now);
            int64_t apply = step.get("apply_ns") ? step.at("apply_ns").integer() : now;
            rules.commit(apply);
            std::string trace = "null";
            auto late = rules.take_late();
            if (auto rec = rules.applied(apply)) trace = "\"apply\"";
            else if (!late.empty()) trace = "\"late\"";
            std::cout << (first_step ? "" : ", ") << "{\"counters\": {";
            first_step = false;
            bool fc = true;
            for (const auto& kv : rules.counters()) {
                std::cout << (fc ? "" : ", ") << json::quote(kv.first) << ": " << kv.second;
                fc = false;
            }
            std::cout << "}, \"state\": " << json::quote(rules.state()) << ", \"trace\": " << trace << "}";
        }
        std::cout << "]}";
    }
    std::cout << "]}\n";
    return 0;
}

// Mutations: flip bits, set bytes to edge values, insert, delete, truncate, splice in bytes
// from elsewhere in the file, and rewrite length fields; deterministic from SEED.
std::string mutate(const std::string& in, std::mt19937_64& rng) {
    std::string s = in;
    int rounds = 1 + int(rng() % 4);
    static const uint8_t edge[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc7,
                                   0xca, 0xcb, 0xcf, 0xd3, 0xd4, 0xd9, 0xdc, 0xde, 0xdf, 0x90, 0xed};
    for (int r = 0; r < rounds; ++r) {
        size_t n = s.size();
        switch (rng() % 7) {
            case 0: if (n) s[rng() % n] ^= char(1u << (rng() % 8)); break;
            case 1: if (n) s[rng() % n] = char(edge[rng() % sizeof edge]); break;
            case 2: s.insert(s.begin() + (n ? rng() % (n + 1) : 0), char(edge[rng() % sizeof edge])); break;
            case 3: if (n) s.erase(rng() % n, 1 + rng() % 4); break;
            case 4: if (n) s.resize(rng() % n); break;
            case 5: if (n > 8) { size_t a = rng() % n, b = rng() % n, len = 1 + rng() % 8;
                        s.replace(a, std::min(len, n - a), s.substr(b, len)); } break;
            case 6: if (n > 4) { size_t a = rng() % (n - 4);
                        for (int k = 0; k < 4; ++k) s[a + k] = char(rng() % 2 ? 0xff : rng()); } break;
        }
    }
    return s;
}

int fuzz(long n, uint64_t seed, const std::vector<std::string>& files, bool dump) {
    std::mt19937_64 rng(seed);
    std::map<std::string, long> verdicts;
    long total = 0;
    for (const auto& path : files) {
        std::string seed_bytes = read_file(path);
        for (long k = 0; k < n; ++k) {
            std::string m = mutate(seed_bytes, rng);
            // as one frame, and split into an envelope + a frame, so ext 2 paths run too
            for (int split = 0; split < 2; ++split) {
                std::vector<wire::Frame> fr{{reinterpret_cast<const uint8_t*>(m.data()), m.size()}};
                if (split) {
                    size_t cut = m.empty() ? 0 : rng() % m.size();
                    fr = {{reinterpret_cast<const uint8_t*>(m.data()), cut},
                          {reinterpret_cast<const uint8_t*>(m.data()) + cut, m.size() - cut}};
                }
                ++total;
                std::string verdict = "ok";
                try {
                    wire::decode_frames(fr);
                } catch (const wire::WireError& e) {
                    if (std::strlen(e.what()) == 0) { std::cerr << "empty error message\n"; return 2; }
                    verdict = wire::error_class(e.kind());
                } catch (const std::exception& e) {
                    std::cerr << "not a WireError: " << e.what() << " (file " << path << ", mutation " << k << ")\n";
                    return 2;
                }
                ++verdicts[verdict];
                if (dump) {
                    std::cout << "{\"frames\": [";
                    for (size_t f = 0; f < fr.size(); ++f) std::cout << (f ? ", " : "") << json::quote(hex(fr[f].data, fr[f].size));
                    std::cout << "], \"verdict\": " << json::quote(verdict) << "}\n";
                }
            }
        }
    }
    std::cout << "{\"mutations\": " << total << ", \"verdicts\": {";
    bool first = true;
    for (const auto& kv : verdicts) {
        std::cout << (first ? "" : ", ") << json::quote(kv.first) << ": " << kv.second;
        first = false;
    }
    std::cout << "}}\n";
    return 0;
}

void write_frames(const std::string& dir, const std::string& name, const std::vector<std::string>& frames,
                  bool& first) {
    std::cout << (first ? "" : ",\n") << "{\"name\": " << json::quote(name) << ", \"frames\": [";
    first = false;
    for (size_t k = 0; k < frames.size(); ++k) {
        std::string path = dir + "/" + name + "." + std::to_string(k) + ".bin";
        std::ofstream(path, std::ios::binary) << frames[k];
        std::cout << (k ? ", " : "") << json::quote(path);
    }
    std::cout << "]}";
}

int encode(const std::string& dir) {
    float values[4] = {0.5f, -1.0f, 0.25f, 1.0f};
    int32_t tokens[4] = {128, 3, 0, 255};
    double grid[6] = {0, 1, 2, 3, 4, 5};
    uint8_t flags[3] = {1, 0, 1};
    wire::Stamps st{{"capture", 1000}, {"obs_recv", 1100}};
    auto e = [](const char* k, Value v) { return wire::Entry{Value::str(k), std::move(v)}; };
    Value chunk = Value::object({e("cycle", Value::uinteger(7)), e("index", Value::uinteger(0)),
                                 e("count", Value::uinteger(1)), e("dest", Value::str("arm")),
                                 e("values", Value::ndarray(wire::DType::F32, {4}, values, 16)),
                                 e("spec", Value::str("ab12")), e("period_ns", Value::integer(20000000)),
                                 e("start_ns", Value::integer(0)),
                                 e("tokens", Value::ndarray(wire::DType::I32, {4}, tokens, 16))});
    Value obs = Value::object({e("values", Value::object({e("grid", Value::ndarray(wire::DType::F64, {2, 3}, grid, 48)),
                                                           e("flags", Value::ndarray(wire::DType::Bool, {3}, flags, 3)),
                                                           e("", Value::ndarray(wire::DType::U8, {0}, flags, 0))})),
                               e("ints", Value::object({e("n", Value::integer(-5))}))});
    uint8_t pixels[18];  // a camera frame, uint8 [2, 3, 3] (docs/wire.md section 5)
    for (int k = 0; k < 18; ++k) pixels[k] = uint8_t(k * 14);
    Value frame = Value::object({e("image", Value::ndarray(wire::DType::U8, {2, 3, 3}, pixels, 18)),
                                 e("capture_ns", Value::integer(990))});
    Value obs_frames = Value::object({e("values", Value::object({})), e("ints", Value::object({})),
                                      e("frames", Value::object({e("overhead", frame)}))});
    Value echo = Value::object({e("src", Value::str("monitor")), e("seq", Value::uinteger(UINT64_MAX)),
                                e("sent_ns", Value::integer(5)), e("recv_ns", Value::integer(6))});
    Value hb = Value::object({e("node", Value::str("cppctl")), e("sent_ns", Value::integer(7)), e("echo", echo)});
    Value health = Value::object({e("node", Value::str("cppctl")), e("state", Value::str("ok")),
                                  e("counters", Value::object({e("ticks", Value::uinteger(UINT64_MAX))})),
                                  e("gauges", Value::object({e("e2e_ms", Value::real(1.25)), e("n", Value::integer(-3))}))});
    Value trace = Value::object({e("node", Value::str("cppctl")), e("cycle", Value::uinteger(3)),
                                 e("stamps", Value::object({e("capture", Value::integer(1)), e("apply", Value::integer(9))})),
                                 e("fields", Value::object({e("e2e_ms", Value::real(0.5))}))});
    Value budget = Value::object({e("level", Value::integer(2)), e("reason", Value::str("slack \xc3\xbc"))});
    Value cmd = Value::object({e("cmd", Value::str("clear")), e("reason", Value::str(""))});
    bool first = true;
    std::cout << "[\n";
    write_frames(dir, "action_chunk", wire::encode_frames("action_chunk", chunk, 42, "cppinf", st), first);
    write_frames(dir, "action_chunk_oob", wire::encode_frames("action_chunk", chunk, 43, "cppinf", st, 4), first);
    write_frames(dir, "obs", wire::encode_frames("obs/cell2", obs, 1, "cpprobot", st), first);
    write_frames(dir, "obs_oob", wire::encode_frames("obs", obs, 2, "cpprobot", st, 0), first);
    write_frames(dir, "obs_frames", wire::encode_frames("obs", obs_frames, 3, "cpprobot", st, 0), first);
    write_frames(dir, "heartbeat", wire::encode_frames("heartbeat", hb, UINT64_MAX, "cppctl", {}), first);
    write_frames(dir, "health", wire::encode_frames("health", health, 3, "cppctl", st), first);
    write_frames(dir, "trace", wire::encode_frames("trace", trace, 4, "cppctl", st), first);
    write_frames(dir, "budget", wire::encode_frames("budget", budget, 5, "cppmon", {}), first);
    write_frames(dir, "command", wire::encode_frames("command", cmd, 6, "cppmon", {}), first);
    std::cout << "]\n";
    // and what the encoder must refuse, with the decoder's error
    float nan_values[4] = {0, NAN, 0, 0};
    Value bad = chunk;
    bad.map[4].value = Value::ndarray(wire::DType::F32, {4}, nan_values, 16);
    for (auto* what : {"nan", "topic"}) {
        try {
            if (std::string(what) == "nan") wire::encode("action_chunk", bad, 0, "x", {});
            else wire::encode("obs x", obs, 0, "x", {});
            std::cerr << "encoder accepted a bad message (" << what << ")\n";
            return 3;
        } catch (const wire::WireError&) {
        }
    }
    return 0;
}

int hash(const std::string& path) {
    json::Value v = json::parse_file(path);
    std::string bytes, h;
    if (v.get("units")) { ActionSpec a = ActionSpec::from_json(v); bytes = a.canonical_bytes(); h = a.hash(); }
    else { TokenizerConfig t = TokenizerConfig::from_json(v); bytes = t.canonical_bytes(); h = t.hash(); }
    std::cout << "{\"hash\": " << json::quote(h) << ", \"canonical_hex\": "
              << json::quote(hex(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size())) << "}\n";
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> a(argv + 1, argv + argc);
    try {
        if (a.size() == 2 && a[0] == "vectors") return vectors(a[1]);
        if (a.size() >= 4 && (a[0] == "fuzz" || a[0] == "fuzz-dump"))
            return fuzz(std::stol(a[1]), std::stoull(a[2]), std::vector<std::string>(a.begin() + 3, a.end()),
                        a[0] == "fuzz-dump");
        if (a.size() == 2 && a[0] == "encode") return encode(a[1]);
        if (a.size() == 2 && a[0] == "hash") return hash(a[1]);
    } catch (const std::exception& e) {
        std::cerr << "rtinfer_wire_tool: " << e.what() << "\n";
        return 1;
    }
    std::cerr << "usage: rtinfer_wire_tool vectors DIR | fuzz[-dump] N SEED FILE... | encode OUTDIR | hash FILE\n";
    return 2;
}
