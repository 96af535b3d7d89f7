// ZeroMQ PUB/SUB framing of docs/wire.md section 2 over cppzmq, with CURVE as
// rtinfer/transport/curve.py sets it up (pyzmq certificate files, the launcher's curve.json).
//
//   rtinfer::bus::Publisher pub(ctx, "ipc:///tmp/ctl", "arm");           // binds
//   pub.publish("trace", body, stamps);                                   // never blocks
//   rtinfer::bus::Subscriber sub(ctx, {"ipc:///tmp/act"}, {"action_chunk"});  // connects
//   if (auto msg = sub.recv(10)) use(msg->env);                           // recv stamped
//
// Neither class is thread-safe. Bad messages are counted (counters), never thrown. A connecting
// socket with a CURVE endpoint tries again after the server's allow-list refused it (heal.hpp).
//
// A connecting socket has one endpoint: the Subscriber keeps a socket per endpoint. libzmq
// (4.3.5) disconnects an endpoint by terminating the session it saved at connect time, but a
// session it ended itself after a protocol error (a refused CURVE handshake, a frame over
// ZMQ_MAXMSGSIZE) is freed and its pointer kept. Healing a refused endpoint (disconnect,
// connect) then terminated whatever session of the socket lived at that address: another
// endpoint's, silently, for good (a fleet robot on three nodes lost the stream of the one that
// had just admitted it, refused by the other two). A socket of one endpoint has no session the
// stale pointer could name.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "rtinfer/wire.hpp"

namespace rtinfer::bus {

// CURVE for one endpoint. A binding socket is the server (it checks clients against the
// public keys in allowed_clients_dir); a connecting one is a client of server_public_key_file.
struct CurveConfig {
    std::string secret_key_file;         // this node's *.key_secret (mode 0600)
    std::string server_public_key_file;  // connecting side: the binder's *.key
    std::string allowed_clients_dir;     // binding side: directory of client *.key files
};

struct KeyPair {
    std::string public_z85, secret_z85;
};
// Keys of a pyzmq certificate file (zmq.auth format). A secret file readable by group or
// others is refused, as curve.py's load_keypair does. Throws std::runtime_error.
KeyPair load_certificate(const std::string& path, bool need_secret);

// The CurveConfig of one endpoint from the launcher's curve.json ({address: {server_key,
// allow}}); nullopt where the map does not list it, or it is not tcp:// (plaintext).
std::optional<CurveConfig> curve_for(const std::string& endpoint, bool bind,
                                     const std::string& secret_file, const std::string& curve_map);

// Sets `s`'s CURVE options for its next bind (server) or connect (a client of the server key
// in `c`); reads the key files. Throws std::runtime_error, zmq::error_t.
void set_curve(zmq::socket_t& s, const CurveConfig& c, bool server);

class Healer;

// One ZAP handler per context: accepts CURVE clients whose public key is in the allow-list,
// read at each handshake (a key added is admitted, a key removed refused, from the next one
// on; sessions already made are not cut: the Python server's watch does that, docs/wire.md).
class Authenticator {
  public:
    Authenticator(zmq::context_t& ctx, const std::string& allowed_clients_dir);
    ~Authenticator();
    Authenticator(const Authenticator&) = delete;
    Authenticator& operator=(const Authenticator&) = delete;

  private:
    zmq::socket_t sock_;
    std::thread thread_;
    std::string dir_;
    std::vector<std::string> allowed_;  // 32-byte binary public keys, as read last
    void load();
    std::atomic<bool> running_{true};
    void serve();
};

class Publisher {
  public:
    Publisher(zmq::context_t& ctx, const std::string& endpoint, std::string src, bool bind = true,
              int hwm = 1000, const std::optional<CurveConfig>& curve = std::nullopt);
    ~Publisher();
    // Send one message without blocking; false if zmq refused it (counted as dropped).
    // Adds a `publish` stamp unless present. Throws WireError if the body is invalid.
    bool publish(const std::string& topic, const wire::Value& body, wire::Stamps stamps = {});
    const std::string& src() const { return src_; }
    std::string endpoint;  // the bound address (tcp://host:* resolved)
    uint64_t sent = 0, dropped = 0;
    // Refused handshakes and reconnects of a connecting CURVE publisher (heal.hpp); else 0.
    // Connecting, its socket has its one endpoint (above).
    uint64_t refusals() const;
    uint64_t reconnects() const;

  private:
    zmq::socket_t sock_;
    std::string src_;
    uint64_t seq_ = 0;
    std::unique_ptr<Authenticator> auth_;
    std::unique_ptr<Healer> healer_;  // a connecting CURVE publisher's
};

struct Received {
    // owns the bytes env's strings and arrays view (on the heap: a small zmq message keeps
    // its bytes inside the message object, which must therefore never move)
    std::vector<std::unique_ptr<zmq::message_t>> frames;
    wire::Envelope env;
};

// The topic frame of a message addressed to one receiver: TOPIC NUL TO NUL (docs/wire.md).
std::string addressed_topic(const std::string& topic, const std::string& to);

class Subscriber {
  public:
    // endpoints: at least one, each connected by a socket of its own (above), all with the same
    // options. curve: endpoint -> CurveConfig (unlisted endpoints are plaintext). to: topic ->
    // robot: of these topics take only the messages addressed to that robot (libzmq filters
    // the rest at the publisher), none unaddressed; every other topic is taken addressed or
    // not. An addressed message whose body `dest` is not its address is rejected.
    Subscriber(zmq::context_t& ctx, const std::vector<std::string>& endpoints,
               std::vector<std::string> topics, int hwm = 1000,
               size_t max_bytes = wire::DEFAULT_MAX_BYTES,
               const std::map<std::string, CurveConfig>& curve = {},
               const std::map<std::string, std::string>& to = {});
    ~Subscriber();
    // The next valid message of any endpoint, or nullopt after timeout_ms (0: don't wait), or at
    // once after a signal interrupted the wait. Sets `recv`. With a CURVE endpoint it waits in
    // slices of at most HEAL_EVERY_NS, trying refused endpoints again between them (heal.hpp).
    // Messages of one endpoint keep their order; across endpoints, none has one.
    std::optional<Received> recv(int timeout_ms = 0);
    // received, rejected, oversize; refusals, reconnects, heal_errors, sessions_lost (a session
    // that ended after its handshake: the others retry refused handshakes soon; heal.hpp)
    std::map<std::string, uint64_t> counters;

  private:
    struct Leg {  // one endpoint's socket, and its healer if CURVE (destroyed before the socket)
        zmq::socket_t sock;
        std::unique_ptr<Healer> healer;
    };
    std::vector<Leg> legs_;  // filled once: a healer holds its socket by reference
    std::vector<zmq::pollitem_t> items_;  // legs_[k]'s socket at [k]: one zmq_poll for all
    size_t first_ = 0;  // read first: the leg after the last message's, so none starves the rest
    bool curve_ = false;  // some leg heals
    std::vector<std::string> topics_;
    std::map<std::string, std::string> to_;
    size_t max_bytes_;
    void connect(zmq::context_t& ctx, const std::string& endpoint, int hwm, const CurveConfig* curve);
    void heal(int64_t now_ns);
    std::optional<Received> take(zmq::socket_t& sock);
};

}  // namespace rtinfer::bus
