#include "rtinfer/heal.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string_view>

namespace rtinfer::bus {

namespace {

std::atomic<uint64_t> monitor_ids{0};  // inproc monitor names, unique in the process

std::string_view port_of(std::string_view address) { return address.substr(address.rfind(':') + 1); }

}  // namespace

// The monitor's RCVHWM is 0 (no limit): libzmq's I/O thread blocks on a full monitor queue,
// and with it every socket of the context (heal.py's note).
Healer::Healer(zmq::context_t& ctx, zmq::socket_t& sock) : sock_(sock), mon_(ctx, zmq::socket_type::pair) {
    std::string address = "inproc://rtinfer.bus.monitor." + std::to_string(monitor_ids++);
    if (zmq_socket_monitor(sock_.handle(), address.c_str(),
                           ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_SUCCEEDED) != 0)
        throw zmq::error_t();
    mon_.set(zmq::sockopt::linger, 0);
    mon_.set(zmq::sockopt::rcvhwm, 0);
    mon_.connect(address);
}

Healer::~Healer() { zmq_socket_monitor(sock_.handle(), nullptr, 0); }

void Healer::watch(const std::string& endpoint, const CurveConfig& curve) {
    endpoints_.push_back({endpoint, curve});
}

bool Healer::heal(int64_t now_ns) {
    if (now_ns < next_look_ns_) return false;
    next_look_ns_ = now_ns + HEAL_EVERY_NS;
    uint64_t before = refusals + reconnects + heal_errors;
    for (uint16_t event; next_event(event);) {
        // libzmq names a tcp peer as resolved (tcp://localhost:5 -> tcp://127.0.0.1:5): an
        // address none was connected as is the endpoints of its port (all of them, if none)
        std::string_view at(static_cast<const char*>(address_.data()), address_.size());
        auto named = [&](const Endpoint& ep) { return ep.address == at; };
        bool exact = std::any_of(endpoints_.begin(), endpoints_.end(), named);
        bool by_port = !exact && std::any_of(endpoints_.begin(), endpoints_.end(), [&](const Endpoint& ep) {
            return port_of(ep.address) == port_of(at);
        });
        if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) ++refusals;
        for (auto& ep : endpoints_) {
            if (exact ? !named(ep) : by_port && port_of(ep.address) != port_of(at)) continue;
            ep.silent_ns = -1;  // a handshake outcome since we reconnected it
            if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) ep.wait_ns = 0;
            else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) refused(ep, now_ns);
        }
    }
    // libzmq (4.3.5) can drop a connect that follows the disconnect of the same endpoint at
    // once, silently: an endpoint reconnected that reached no handshake outcome since is
    // connected again (heal.py: SILENT_NS)
    for (auto& ep : endpoints_)
        if ((ep.retry_ns >= 0 && now_ns >= ep.retry_ns) ||
            (ep.silent_ns >= 0 && now_ns - ep.silent_ns >= SILENT_NS))
            reconnect(ep, now_ns);
    return refusals + reconnects + heal_errors != before;
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

// Refused again while a retry is pending: the one retry stands.
void Healer::refused(Endpoint& ep, int64_t now_ns) {
    if (ep.retry_ns >= 0) return;
    ep.wait_ns = std::min(ep.wait_ns ? 2 * ep.wait_ns : REFUSED_FIRST_NS, REFUSED_RETRY_NS);
    ep.retry_ns = now_ns + ep.wait_ns;
}

// disconnect, the endpoint's CURVE options again (the socket holds the last connect's), connect
void Healer::reconnect(Endpoint& ep, int64_t now_ns) {
    ep.retry_ns = ep.silent_ns = -1;
    try {
        sock_.disconnect(ep.address);
    } catch (const zmq::error_t&) {
        // libzmq dropped it already: connecting again is what matters
    }
    try {
        set_curve(sock_, ep.curve, false);
        sock_.connect(ep.address);
        ++reconnects;
        ep.silent_ns = now_ns;
    } catch (const std::exception&) {  // a key file gone meanwhile: tried again a while later
        ++heal_errors;
        ep.retry_ns = now_ns + REFUSED_RETRY_NS;
    }
}

}  // namespace rtinfer::bus
