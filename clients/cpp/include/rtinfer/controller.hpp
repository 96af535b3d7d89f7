// The robot side's chunk rules, as the reference controller (controllers/node.py) applies
// them: which action_chunk waypoints are taken, the counter each rejected one is counted
// under, the chunk under assembly, the local watchdog, and the trace records the monitor
// reads (an `apply` record per applied cycle, a `late_index` record per late cycle).
// No sockets and no clock reads: every call takes now_ns, so a test replays it exactly.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rtinfer/spec.hpp"
#include "rtinfer/wire.hpp"

namespace rtinfer {

struct ControllerConfig {
    std::string name = "controller";  // the `node` of its health, heartbeat and trace bodies
    std::string robot;                // the `src` its obs go out under: chunks' `dest`
    int64_t deadline_ns = 100000000;
    int64_t chunk_interval_ns = 0;     // the policy's period: the watchdog waits this + deadline
    int64_t max_period_ns = 1000000000;  // a waypoint period (or start) longer is bogus
    int64_t clock_uncertainty_ns = 0;  // how far a capture may lie in the robot's future: 0
                                       // when the robot stamps its own obs (docs/wire.md 5)
    int64_t rtc_max_ns = 500000000;    // real-time chunking: the longest after capture a
                                       // robot commits to, and a conditioned chunk stays fresh
    int64_t open_loop_ns = 0;          // takes a node's asks under overload: executes a chunk
                                       // at most this long after capture (0: takes none)
    TokenizerConfig tokenizer;         // token chunks must carry its hash
    std::optional<ActionSpec> action;  // continuous chunks must carry its hash; none: refused
};

// The reference controller's counters, in its order (controllers/node.py COUNTERS).
extern const char* const COUNTERS[16];

// The first 16 hex digits of sha256 over n values as float32, little-endian: what a
// committed prefix is named by (docs/wire.md section 5).
std::string prefix_hash(const std::vector<float>& values);

// Real-time chunking: capture -> chunk applied per cycle (late: capture -> arrival), the
// last 32; estimate() is their 90th percentile (the sample at that rank), 0 before any.
class DelayEstimate {
  public:
    void record(int64_t delay_ns);
    int64_t estimate() const;

  private:
    std::vector<int64_t> ring_ = std::vector<int64_t>(32, 0);
    size_t n_ = 0, i_ = 0;
};

// An obs body's `committed`: waypoints from..from+n-1 of chunk `chunk`, values row-major.
struct Committed {
    uint64_t chunk = 0, from = 0, n = 0;
    std::vector<float> values;  // n * D
    int64_t start_ns = 0;
};

struct TraceRecord {  // a `trace` body: {node, cycle, stamps, fields: {name: value}}
    uint64_t cycle;
    wire::Stamps stamps;
    std::string field;
    double value;
    double window_ms = 0;  // fresh this long after capture (conditioned, executed horizon; 0: none)
};

class ChunkRules {
  public:
    explicit ChunkRules(ControllerConfig cfg);

    // One action_chunk message (stamps as the bus handed it out, `recv` included). Returns
    // the counter it went to: "waypoints_accepted" if taken, else its rejected_* reason.
    std::string on_waypoint(const wire::Envelope& env, int64_t now_ns);
    void on_command(const std::string& cmd, int64_t now_ns);
    void check_watchdog(int64_t now_ns);  // after each batch of messages
    // Just before the tick computes a new chunk's first setpoint (after the messages and the
    // robot's read): a chunk whose capture is now older than the deadline is dropped
    // (late_applies, a `late_index` 0 record, a hold), so none goes out stale.
    void commit(int64_t commit_ns);
    // The chunk's first setpoint went out, committed at apply_ns: its `apply` record, if due.
    std::optional<TraceRecord> applied(int64_t apply_ns);
    std::vector<TraceRecord> take_late();  // `late_index` records since the last call
    // The committed prefix of an obs captured at capture_ns, as controllers/rtc.py picks it:
    // the plan in use's waypoints due from the new chunk's waypoint 0 until capture + the
    // delay estimate + 2 ms (at most rtc_max_ns, the horizon less one); none while not
    // tracking, before a delay is measured, or when none is due.
    std::optional<Committed> committed_prefix(int64_t capture_ns) const;
    // One obs with a prefix in flight (controllers/rtc.py): sent() when it went out, its chunk
    // awaited until until_ns (its window or the deadline, the later); any waypoint with its
    // capture answers it; while awaiting(now), the next obs is held back.
    void sent(int64_t capture_ns, int64_t until_ns) { awaited_ = {capture_ns, until_ns}; }
    bool awaiting(int64_t now_ns) const { return awaited_ && now_ns < awaited_->second; }
    // A node's asks under overload (docs/wire.md section 5, "Overload"; controllers/pace.py),
    // with open_loop_ns: is an obs captured at capture_ns sooner than the period asked by the
    // newest chunk taken after the last one sent (obs_sent)? The ask lapses two periods and a
    // deadline after its chunk's capture.
    bool hold_back(int64_t capture_ns) const;
    void obs_sent(int64_t capture_ns) { last_obs_ = capture_ns; }
    int64_t asked_period_ns() const { return asked_ns_; }  // 0: none
    DelayEstimate delay;

    uint64_t& counter(const std::string& name);
    const std::vector<std::pair<std::string, uint64_t>>& counters() const { return counters_; }
    const std::string& state() const { return state_; }  // idle|run|hold|safe_hold|stopped
    bool holding() const { return state_ != "run"; }

    // The chunk being followed: waypoints [0, ready), waypoint i due at
    // capture + start + i * period (ns). Empty before the first chunk.
    struct Chunk {
        std::vector<std::vector<double>> waypoints;
        std::vector<bool> got;
        std::string src;
        uint64_t cycle = 0, count = 0;
        int64_t capture_ns = 0, period_ns = 0, start_ns = 0;
        int64_t window_ns = 0;  // fresh this long after capture (prefix, executed horizon)
        wire::Stamps stamps;  // its first-received waypoint's
        bool keyed = false;
        size_t received = 0, ready = 0, applied = 0;
    };
    const Chunk& chunk() const { return chunk_; }
    int64_t e2e_last_ns = 0, e2e_max_ns = 0;
    const ControllerConfig& config() const { return cfg_; }

  private:
    ControllerConfig cfg_;
    std::string tokenizer_hash_, action_hash_;
    std::vector<double> bin_width_;
    std::vector<std::pair<std::string, uint64_t>> counters_;
    std::string state_ = "idle";
    Chunk chunk_;
    bool apply_pending_ = false;
    std::string state_before_ = "idle";  // the state before the pending chunk was taken
    std::optional<int64_t> last_fresh_ns_;
    bool late_keyed_ = false;
    std::string late_src_;
    uint64_t late_cycle_ = 0;
    int64_t late_capture_ = 0;
    std::vector<TraceRecord> late_;
    std::optional<std::pair<int64_t, int64_t>> awaited_;  // (capture, until) of the obs in flight
    std::optional<int64_t> plan_end_;  // the chunk in use's executed horizon ends then
    int64_t asked_ns_ = 0, asked_until_ = 0;  // the observation period asked, until then
    std::optional<int64_t> last_obs_;  // capture of the last obs sent
    void new_chunk(const wire::Value& body, int64_t capture);

    std::string check(const wire::Envelope& env, int64_t now, std::vector<double>& wp);
    std::string add(const wire::Envelope& env, const std::vector<double>& wp);
    void take(int64_t now);
    void late(const wire::Envelope& env);
    // the `late_index` record of a late cycle (src, cycle, capture), reported once
    void report_late(const std::string& src, uint64_t cycle, int64_t capture,
                     const wire::Stamps& stamps, double index);
    void hold(const std::string& state);
    // a conditioned chunk (its `conditioned` map, its capture) joins the plan in use
    bool joins(const wire::Value& named, int64_t capture) const;
    // fresh this long after capture past the deadline: a committed prefix's window (start + n *
    // period, at most rtc_max_ns) or an executed horizon's (start + (e-1) * period, at most
    // open_loop_ns), the later; 0: none
    int64_t window(const wire::Value& body) const;
    bool held() const { return state_ == "safe_hold" || state_ == "stopped"; }
};

// One simulated axis per action dimension, tracking the chunk's waypoints: the reference
// is the waypoints interpolated by due time; the axis follows it with a velocity limit.
class SimAxes {
  public:
    SimAxes(size_t dim, double gain_per_s = 30.0, double vel_limit = 2.0);
    void step(const ChunkRules& rules, int64_t now_ns, double dt_s);
    std::vector<double> pos, ref;

  private:
    double gain_, vmax_;
    std::vector<double> from_;  // where the current chunk started from
    int64_t chunk_capture_ = -1;
    uint64_t chunk_cycle_ = 0;
};

}  // namespace rtinfer
