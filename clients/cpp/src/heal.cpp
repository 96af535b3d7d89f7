#include "rtinfer/heal.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

namespace rtinfer::bus {

namespace {

std::atomic<uint64_t> monitor_ids{0};  // inproc monitor names, unique in the process

}  // namespace

// The monitor's RCVHWM is 0 (no limit): libzmq's I/O thread blocks on a full monitor queue,
// and with it every socket of the context (heal.py's note).
Healer::Healer(zmq::context_t& ctx, zmq::socket_t& sock, std::string endpoint)
    : sock_(sock), mon_(ctx, zmq::socket_type::pair), endpoint_(std::move(endpoint)) {
    std::string address = "inproc://rtinfer.bus.monitor." + std::to_string(monitor_ids++);
    if (zmq_socket_monitor(sock_.handle(), address.c_str(),
                           ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                               ZMQ_EVENT_DISCONNECTED) != 0)
        throw zmq::error_t();
    mon_.set(zmq::sockopt::linger, 0);
    mon_.set(zmq::sockopt::rcvhwm, 0);
    mon_.connect(address);
}

Healer::~Healer() { zmq_socket_monitor(sock_.handle(), nullptr, 0); }

bool Healer::heal(int64_t now_ns) {
    if (now_ns < next_look_ns_) return false;
    next_look_ns_ = now_ns + HEAL_EVERY_NS;
    uint64_t before = refusals + reconnects + heal_errors + sessions_lost;
    for (uint16_t event; next_event(event);) {
        if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            wait_ns_ = 0;
            up_ = true;
        } else if (event == ZMQ_EVENT_DISCONNECTED) {
            if (up_) ++sessions_lost;  // not a handshake that failed
            up_ = false;
        } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
            ++refusals;
            if (retry_ns_ < 0) {  // else refused again before the retry due: that one stands
                wait_ns_ = std::min(wait_ns_ ? 2 * wait_ns_ : REFUSED_FIRST_NS, REFUSED_RETRY_NS);
                retry_ns_ = now_ns + wait_ns_;
            }
        }
    }
    if (retry_ns_ >= 0 && now_ns >= retry_ns_) reconnect(now_ns);
    return refusals + reconnects + heal_errors + sessions_lost != before;
}

// A handshake still on its way when told is retried REFUSED_FIRST_NS after its refusal.
void Healer::hurry(int64_t now_ns) {
    wait_ns_ = 0;
    if (retry_ns_ >= 0) retry_ns_ = now_ns;
}

// One event (its two frames), without waiting. An interruption (EINTR) is "none yet", as
// bus.cpp's poll_in reads it; the lone address frame it may leave is skipped next time.
bool Healer::next_event(uint16_t& event) {
    try {
        while (mon_.recv(event_, zmq::recv_flags::dontwait)) {
            if (event_.size() != 6 || !event_.more()) continue;
            if (!mon_.recv(address_, zmq::recv_flags::dontwait)) return false;
            std::memcpy(&event, event_.data(), sizeof event);
            return true;
        }
    } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
    }
    return false;
}

// Disconnect, then connect: a new session, with the socket's CURVE options (this endpoint's).
// libzmq (4.3.5) disconnects by terminating the session it saved for the endpoint at connect
// time, though the refused one is freed by then: a socket of one endpoint has no other
// session that the stale pointer could name (bus.hpp).
void Healer::reconnect(int64_t now_ns) {
    retry_ns_ = -1;
    try {
        sock_.disconnect(endpoint_);
    } catch (const zmq::error_t&) {
        // libzmq dropped it already: connecting again is what matters
    }
    try {
        sock_.connect(endpoint_);
        ++reconnects;
    } catch (const zmq::error_t&) {  // tried again a while later
        ++heal_errors;
        retry_ns_ = now_ns + REFUSED_RETRY_NS;
    }
}

}  // namespace rtinfer::bus
