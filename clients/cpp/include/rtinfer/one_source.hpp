// Which policy node's chunks a robot takes when several may send it some: a fleet's nodes,
// two of which may serve one robot for a while (after a partition). It takes the node it
// took last until that one has been silent for quiet_ns (the watchdog's wait: the chunk
// interval plus the deadline, after which the robot holds anyway); another node's chunks
// meanwhile are counted (chunks_other_source, per waypoint message) and not taken; taking
// another node is counted (source_switches). The rule of controllers/bench_robot.py's
// OneSource. Reads no clock: every call takes the message's `recv` stamp. Not thread-safe.
#pragma once

#include <cstdint>
#include <string>

namespace rtinfer {

class OneSource {
  public:
    explicit OneSource(int64_t quiet_ns) : quiet_ns_(quiet_ns) {}

    // A chunk for this robot from node `src`, received at recv_ns: take it?
    bool take(const std::string& src, int64_t recv_ns) {
        if (!followed_ || src != src_) {
            if (followed_ && recv_ns - last_ns_ <= quiet_ns_) {
                ++chunks_other_source;
                return false;
            }
            source_switches += followed_;
            src_ = src;
            followed_ = true;
        }
        last_ns_ = recv_ns;
        return true;
    }
    const std::string& src() const { return src_; }  // the node followed ("" before any)

    uint64_t chunks_other_source = 0, source_switches = 0;

  private:
    int64_t quiet_ns_, last_ns_ = 0;
    std::string src_;
    bool followed_ = false;
};

}  // namespace rtinfer
