// Trying again after a CURVE server's allow-list refused a connecting socket (docs/wire.md,
// "The allow-list"), as rtinfer/transport/bus/heal.py does for the Python bus: libzmq never
// reconnects an endpoint after a ZAP refusal (ZMQ_EVENT_HANDSHAKE_FAILED_AUTH), so a key added
// to the server's allow-list a moment after the first handshake would never be used.
//
//   Healer healer(ctx, sock, ep);           // before the socket connects: it misses no event
//   sock.connect(ep);
//   healer.heal(now_ns);                    // often: it looks at most every HEAL_EVERY_NS
//
// The socket has that one endpoint (bus.hpp says why), so every event is that endpoint's.
// Not thread-safe: the socket's owner calls it. Never blocks; allocates nothing itself.
#pragma once

#include <cstdint>
#include <string>

#include <zmq.hpp>

namespace rtinfer::bus {

constexpr int64_t HEAL_EVERY_NS = 100'000'000;       // how often the socket's events are read
constexpr int64_t REFUSED_FIRST_NS = 100'000'000;    // a refused endpoint is tried again this
constexpr int64_t REFUSED_RETRY_NS = 1'000'000'000;  // long after, then twice as long, up to this

class Healer {
  public:
    // Monitors `sock`, which connects to `endpoint` and nothing else, over a PAIR socket of
    // `ctx`. Throws zmq::error_t.
    Healer(zmq::context_t& ctx, zmq::socket_t& sock, std::string endpoint);
    ~Healer();  // stops the monitor; destroy it before the socket
    Healer(const Healer&) = delete;
    Healer& operator=(const Healer&) = delete;
    // Read the socket's events (at most every HEAL_EVERY_NS) and reconnect the endpoint when
    // its retry is due: REFUSED_FIRST_NS after a refusal, twice as long after each refusal in a
    // row, at most REFUSED_RETRY_NS; a handshake that succeeds starts the schedule over. True if
    // a counter changed.
    bool heal(int64_t now_ns);
    // Try a refused handshake again at the next look, backing off from REFUSED_FIRST_NS anew: a
    // sibling socket lost the session that served its owner (a fleet's robot whose node died is
    // placed on another node, one that refused it so far). heal.py's Healer.hurry.
    void hurry(int64_t now_ns);
    uint64_t refusals = 0, reconnects = 0, heal_errors = 0;
    uint64_t sessions_lost = 0;  // sessions that ended after their handshake, for any reason

  private:
    zmq::socket_t& sock_;
    zmq::socket_t mon_;
    std::string endpoint_;
    zmq::message_t event_, address_;  // one monitor event: 6 bytes (event, value), the address
    int64_t next_look_ns_ = 0;
    int64_t retry_ns_ = -1;  // when to connect again (-1: nothing to do)
    int64_t wait_ns_ = 0;    // the last wait after a refusal (0: none since a handshake succeeded)
    bool up_ = false;        // a session is past its handshake
    bool next_event(uint16_t& event);
    void reconnect(int64_t now_ns);
};

}  // namespace rtinfer::bus
