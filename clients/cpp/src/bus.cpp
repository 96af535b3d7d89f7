#include "rtinfer/bus.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <stdexcept>

#include "rtinfer/heal.hpp"
#include "rtinfer/json.hpp"

namespace rtinfer::bus {

namespace {

// zmq::poll, with a signal's interruption (EINTR: poll(2) is never restarted, whatever the
// handler's flags) read as "nothing yet" (-1; 0: the timeout passed): the caller returns or
// polls again, and its loop sees its stop flag. cppzmq throws on EINTR; uncaught, that aborted
// the controller on a signal.
int poll_in(std::vector<zmq::pollitem_t>& items, std::chrono::milliseconds timeout) {
    try {
        return zmq::poll(items.data(), items.size(), timeout);
    } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) return -1;
        throw;
    }
}

std::string quoted_value(const std::string& line) {
    auto a = line.find('"'), b = line.rfind('"');
    if (a == std::string::npos || b <= a) return "";
    return line.substr(a + 1, b - a - 1);
}

std::string z85_to_binary(const std::string& z85) {
    if (z85.size() != 40) throw std::runtime_error("a CURVE key must be 40 Z85 characters");
    std::string out(32, '\0');
    if (!zmq_z85_decode(reinterpret_cast<uint8_t*>(out.data()), z85.c_str()))
        throw std::runtime_error("a CURVE key is not valid Z85");
    return out;
}

}  // namespace

void set_curve(zmq::socket_t& s, const CurveConfig& c, bool server) {
    KeyPair kp = load_certificate(c.secret_key_file, true);
    s.set(zmq::sockopt::curve_secretkey, kp.secret_z85);
    s.set(zmq::sockopt::curve_publickey, kp.public_z85);
    if (server) {
        s.set(zmq::sockopt::curve_server, 1);
        return;
    }
    if (c.server_public_key_file.empty())
        throw std::runtime_error("CURVE: the connecting side needs the server's public key file");
    s.set(zmq::sockopt::curve_serverkey, load_certificate(c.server_public_key_file, false).public_z85);
}

KeyPair load_certificate(const std::string& path, bool need_secret) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) throw std::runtime_error("cannot read key file " + path);
    if (need_secret && (st.st_mode & 077))
        throw std::runtime_error("secret key file " + path + " is accessible by group/others; run: chmod 600 " + path);
    std::ifstream f(path);
    KeyPair kp;
    for (std::string line; std::getline(f, line);) {
        auto k = line.find_first_not_of(" \t");
        if (k == std::string::npos || line[k] == '#') continue;
        if (line.compare(k, 10, "public-key") == 0) kp.public_z85 = quoted_value(line);
        if (line.compare(k, 10, "secret-key") == 0) kp.secret_z85 = quoted_value(line);
    }
    if (kp.public_z85.size() != 40) throw std::runtime_error(path + " holds no public key");
    if (need_secret && kp.secret_z85.size() != 40)
        throw std::runtime_error(path + " holds no secret key; pass the .key_secret file, not the .key");
    return kp;
}

std::optional<CurveConfig> curve_for(const std::string& endpoint, bool bind,
                                     const std::string& secret_file, const std::string& curve_map) {
    if (curve_map.empty()) {
        if (!secret_file.empty())
            throw std::runtime_error("--curve-secret needs --curve-map (the launcher's curve.json)");
        return std::nullopt;
    }
    json::Value table = json::parse_file(curve_map);
    const json::Value* entry = table.get(endpoint);
    if (!entry || endpoint.rfind("tcp://", 0) != 0) return std::nullopt;
    if (secret_file.empty())
        throw std::runtime_error(endpoint + " requires CURVE (" + curve_map + ") but this node has no key: "
                                 "pass --curve-secret FILE.key_secret");
    load_certificate(secret_file, true);
    CurveConfig c{secret_file, "", ""};
    if (bind) {
        const json::Value* allow = entry->get("allow");
        struct stat st;
        if (!allow || stat(allow->text.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
            throw std::runtime_error(endpoint + ": the allow-list directory in " + curve_map + " does not exist");
        c.allowed_clients_dir = allow->text;
    } else {
        const json::Value* key = entry->get("server_key");
        if (!key) throw std::runtime_error(endpoint + ": no server_key in " + curve_map);
        load_certificate(key->text, false);
        c.server_public_key_file = key->text;
    }
    return c;
}

// ---- ZAP (ZeroMQ RFC 27): the allow-list check for CURVE servers ----------------------------
Authenticator::Authenticator(zmq::context_t& ctx, const std::string& dir)
    : sock_(ctx, zmq::socket_type::rep), dir_(dir) {
    DIR* d = opendir(dir.c_str());
    if (!d) throw std::runtime_error("allowed_clients_dir " + dir + " is not a directory");
    closedir(d);
    load();
    sock_.set(zmq::sockopt::linger, 0);
    sock_.bind("inproc://zeromq.zap.01");
    thread_ = std::thread([this] { serve(); });
}

// The keys of the directory's *.key files now; one that does not parse (half copied) is left
// out, a directory gone reads as empty (every key refused). A handshake is rare: no cache.
void Authenticator::load() {
    allowed_.clear();
    DIR* d = opendir(dir_.c_str());
    if (!d) return;
    while (dirent* e = readdir(d)) {
        std::string name = e->d_name;
        if (name.size() <= 4 || name.compare(name.size() - 4, 4, ".key") != 0) continue;
        try {
            allowed_.push_back(z85_to_binary(load_certificate(dir_ + "/" + name, false).public_z85));
        } catch (const std::exception&) {
        }
    }
    closedir(d);
}

Authenticator::~Authenticator() {
    running_ = false;
    thread_.join();
}

void Authenticator::serve() {
    std::vector<zmq::pollitem_t> items{{sock_.handle(), 0, ZMQ_POLLIN, 0}};
    while (running_) {
        if (poll_in(items, std::chrono::milliseconds(50)) <= 0) continue;
        std::vector<zmq::message_t> req;
        do {
            req.emplace_back();
            if (!sock_.recv(req.back(), zmq::recv_flags::none)) return;
        } while (req.back().more());
        // version, request_id, domain, address, identity, mechanism, credentials...
        bool ok = req.size() >= 7 && req[5].to_string() == "CURVE";
        if (ok) {
            std::string key = req[6].to_string();
            load();
            ok = false;
            for (const auto& a : allowed_) ok |= a == key;
        }
        std::string version = req.empty() ? "1.0" : req[0].to_string();
        std::string id = req.size() > 1 ? req[1].to_string() : "";
        sock_.send(zmq::buffer(version), zmq::send_flags::sndmore);
        sock_.send(zmq::buffer(id), zmq::send_flags::sndmore);
        sock_.send(zmq::buffer(std::string(ok ? "200" : "400")), zmq::send_flags::sndmore);
        sock_.send(zmq::buffer(std::string(ok ? "OK" : "client key not allowed")), zmq::send_flags::sndmore);
        sock_.send(zmq::buffer(std::string()), zmq::send_flags::sndmore);  // user id
        sock_.send(zmq::buffer(std::string()), zmq::send_flags::none);     // metadata
    }
}

// ---- Publisher ------------------------------------------------------------------------------
Publisher::Publisher(zmq::context_t& ctx, const std::string& ep, std::string src, bool bind, int hwm,
                     const std::optional<CurveConfig>& curve)
    : sock_(ctx, zmq::socket_type::pub), src_(std::move(src)) {
    if (!wire::valid_name(src_)) throw std::invalid_argument("publisher src is not a valid name");
    sock_.set(zmq::sockopt::linger, 0);
    sock_.set(zmq::sockopt::sndhwm, hwm);
    if (curve) {
        if (bind) auth_ = std::make_unique<Authenticator>(ctx, curve->allowed_clients_dir);
        set_curve(sock_, *curve, bind);
    }
    if (bind) {
        sock_.bind(ep);
        endpoint = sock_.get(zmq::sockopt::last_endpoint);
    } else {
        if (curve) healer_ = std::make_unique<Healer>(ctx, sock_, ep);
        sock_.connect(ep);
        endpoint = ep;
    }
}

Publisher::~Publisher() = default;
uint64_t Publisher::refusals() const { return healer_ ? healer_->refusals : 0; }
uint64_t Publisher::reconnects() const { return healer_ ? healer_->reconnects : 0; }

bool Publisher::publish(const std::string& topic, const wire::Value& body, wire::Stamps stamps) {
    if (healer_) healer_->heal(wire::now_ns());
    if (!wire::get_stamp(stamps, "publish")) wire::set_stamp(stamps, "publish", wire::now_ns());
    auto frames = wire::encode_frames(topic, body, seq_, src_, stamps);
    ++seq_;  // every message that encodes takes a number, sent or not
    auto sent_ok = sock_.send(zmq::buffer(topic), zmq::send_flags::dontwait | zmq::send_flags::sndmore);
    for (size_t k = 0; sent_ok && k < frames.size(); ++k) {
        auto more = k + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
        sent_ok = sock_.send(zmq::buffer(frames[k]), zmq::send_flags::dontwait | more);
    }
    // A PUB socket takes a started message whole, so a refusal can only come first.
    if (!sent_ok) ++dropped; else ++sent;
    return bool(sent_ok);
}

// ---- Subscriber -----------------------------------------------------------------------------
std::string addressed_topic(const std::string& topic, const std::string& to) {
    return topic + '\0' + to + '\0';  // the closing NUL: "cell-1" must not match "cell-10"
}

Subscriber::Subscriber(zmq::context_t& ctx, const std::vector<std::string>& endpoints,
                       std::vector<std::string> topics, int hwm, size_t max_bytes,
                       const std::map<std::string, CurveConfig>& curve,
                       const std::map<std::string, std::string>& to)
    : topics_(std::move(topics)), to_(to), max_bytes_(max_bytes) {
    if (topics_.empty()) throw std::invalid_argument("Subscriber needs at least one topic");
    if (endpoints.empty()) throw std::invalid_argument("Subscriber needs at least one endpoint");
    for (const auto& kv : to_)
        if (std::find(topics_.begin(), topics_.end(), kv.first) == topics_.end() || !wire::valid_name(kv.second))
            throw std::invalid_argument("Subscriber: `to` names topic " + kv.first +
                                        " it does not subscribe to, or an invalid robot name");
    legs_.reserve(endpoints.size());
    for (const auto& ep : endpoints) {
        auto c = curve.find(ep);
        connect(ctx, ep, hwm, c == curve.end() ? nullptr : &c->second);
    }
    for (auto* k : {"received", "rejected", "oversize", "refusals", "reconnects", "heal_errors",
                    "sessions_lost"})
        counters[k] = 0;
}

Subscriber::~Subscriber() = default;

// A socket of its own for `endpoint` (bus.hpp says why), its healer watching before it connects.
void Subscriber::connect(zmq::context_t& ctx, const std::string& endpoint, int hwm,
                         const CurveConfig* curve) {
    Leg& leg = legs_.emplace_back(Leg{zmq::socket_t(ctx, zmq::socket_type::sub), nullptr});
    zmq::socket_t& sock = leg.sock;
    sock.set(zmq::sockopt::linger, 0);
    sock.set(zmq::sockopt::rcvhwm, hwm);
    // libzmq's per-frame memory guard: 4 x max_bytes, at least 64 KiB (docs/wire.md section 6)
    sock.set(zmq::sockopt::maxmsgsize, int64_t(std::max<size_t>(4 * max_bytes_, 65536)));
    for (const auto& t : topics_) {
        auto a = to_.find(t);
        sock.set(zmq::sockopt::subscribe, a == to_.end() ? t : addressed_topic(t, a->second));
    }
    if (curve) {
        leg.healer = std::make_unique<Healer>(ctx, sock, endpoint);
        set_curve(sock, *curve, false);
        curve_ = true;
    }
    sock.connect(endpoint);
    items_.push_back({sock.handle(), 0, ZMQ_POLLIN, 0});
}

// Each CURVE leg's healer; the counters are their sums (short keys, SSO: no allocation).
void Subscriber::heal(int64_t now_ns) {
    bool changed = false;
    for (auto& leg : legs_)
        if (leg.healer) changed |= leg.healer->heal(now_ns);
    if (!changed) return;
    uint64_t refusals = 0, reconnects = 0, heal_errors = 0, lost = 0;
    for (const auto& leg : legs_) {
        if (!leg.healer) continue;
        refusals += leg.healer->refusals;
        reconnects += leg.healer->reconnects;
        heal_errors += leg.healer->heal_errors;
        lost += leg.healer->sessions_lost;
    }
    counters["refusals"] = refusals;
    counters["reconnects"] = reconnects;
    counters["heal_errors"] = heal_errors;
    if (lost != counters["sessions_lost"]) {  // a node that served us is gone: hurry the others
        counters["sessions_lost"] = lost;
        for (auto& leg : legs_)
            if (leg.healer) leg.healer->hurry(now_ns);
    }
}

std::optional<Received> Subscriber::recv(int timeout_ms) {
    auto deadline = wire::now_ns() + int64_t(timeout_ms) * 1000000;
    constexpr int64_t slice_ms = HEAL_EVERY_NS / 1000000;
    const size_t n = legs_.size();
    while (true) {
        int64_t now = wire::now_ns();
        int64_t left_ms = std::max<int64_t>(0, (deadline - now + 999999) / 1000000);
        bool sliced = false;  // waiting less than what is left, to heal in between
        if (curve_) {
            heal(now);
            sliced = left_ms > slice_ms;
            left_ms = std::min(left_ms, slice_ms);
        }
        int ready = poll_in(items_, std::chrono::milliseconds(left_ms));
        if (ready < 0 || (ready == 0 && !sliced)) return std::nullopt;
        if (ready == 0) continue;
        for (size_t k = 0; k < n; ++k) {
            size_t at = (first_ + k) % n;
            if (!(items_[at].revents & ZMQ_POLLIN)) continue;
            if (auto msg = take(legs_[at].sock)) {
                first_ = (at + 1) % n;
                return msg;
            }
        }
        if (wire::now_ns() >= deadline && timeout_ms >= 0 &&
            poll_in(items_, std::chrono::milliseconds(0)) <= 0)
            return std::nullopt;
    }
}

std::optional<Received> Subscriber::take(zmq::socket_t& sock) {
    Received r;
    do {
        r.frames.push_back(std::make_unique<zmq::message_t>());
        if (!sock.recv(*r.frames.back(), zmq::recv_flags::dontwait)) return std::nullopt;
    } while (r.frames.back()->more());
    if (r.frames.size() < 2) {  // a lone frame: no envelope
        ++counters["rejected"];
        return std::nullopt;
    }
    // frame 0: TOPIC, or TOPIC NUL ROBOT NUL (addressed); zmq's filter matches prefixes only
    std::string topic = r.frames[0]->to_string(), dest;
    bool addressed = false;
    size_t nul = topic.find('\0');
    if (nul != std::string::npos) {
        if (topic.size() < nul + 3 || topic.back() != '\0' ||
            topic.find('\0', nul + 1) != topic.size() - 1) {
            ++counters["rejected"];
            return std::nullopt;
        }
        dest = topic.substr(nul + 1, topic.size() - nul - 2);
        topic.resize(nul);
        addressed = true;
    }
    bool ours = false;
    for (const auto& t : topics_) ours |= t == topic;
    auto want = to_.find(topic);
    if (want != to_.end() && (!addressed || dest != want->second)) ours = false;
    if (!ours) {
        ++counters["rejected"];
        return std::nullopt;
    }
    std::vector<wire::Frame> views;
    for (size_t k = 1; k < r.frames.size(); ++k)
        views.push_back({static_cast<const uint8_t*>(r.frames[k]->data()), r.frames[k]->size()});
    try {
        r.env = wire::decode_frames(views, max_bytes_, topics_);
    } catch (const wire::WireError& e) {
        ++counters[e.kind() == wire::ErrorKind::Oversize ? "oversize" : "rejected"];
        return std::nullopt;
    }
    const wire::Value* body_dest = addressed ? r.env.body.get("dest") : nullptr;
    if (r.env.topic != topic || (addressed && (!body_dest || body_dest->s != dest))) {
        ++counters["rejected"];
        return std::nullopt;
    }
    wire::set_stamp(r.env.stamps, "recv", wire::now_ns());
    ++counters["received"];
    ++counters["received." + topic];
    return r;
}

}  // namespace rtinfer::bus
