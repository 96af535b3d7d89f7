#include "rtinfer/controller.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace rtinfer {

using wire::Envelope;
using wire::Value;

const char* const COUNTERS[16] = {"ticks", "late_ticks", "chunks_accepted", "waypoints_accepted",
                                  "rejected_stale", "late_waypoints", "late_applies", "rejected_bad",
                                  "rejected_hash", "rejected_dest", "rejected_hold", "holds",
                                  "commands", "chunks_conditioned", "prefix_mismatch",
                                  "chunks_executes"};

std::string prefix_hash(const std::vector<float>& values) {
    std::string bytes(values.size() * sizeof(float), '\0');  // little-endian hosts
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return sha256_hex(bytes).substr(0, 16);
}

void DelayEstimate::record(int64_t delay_ns) {
    ring_[i_] = std::max<int64_t>(delay_ns, 0);
    i_ = (i_ + 1) % ring_.size();
    n_ = std::min(n_ + 1, ring_.size());
}

int64_t DelayEstimate::estimate() const {
    if (n_ == 0) return 0;
    std::vector<int64_t> s(ring_.begin(), ring_.begin() + long(n_));
    std::sort(s.begin(), s.end());
    size_t rank = size_t(std::ceil(0.9 * double(n_)));
    return s[std::min(n_ - 1, rank - 1)];
}
static const std::string LATE = "late";

ChunkRules::ChunkRules(ControllerConfig cfg) : cfg_(std::move(cfg)) {
    if (cfg_.robot.empty() || !wire::valid_name(cfg_.robot) || !wire::valid_name(cfg_.name))
        throw std::invalid_argument("controller config: name and robot must be valid names");
    if (cfg_.deadline_ns <= 0 || cfg_.chunk_interval_ns < 0 || cfg_.max_period_ns <= 0 ||
        cfg_.clock_uncertainty_ns < 0 || cfg_.clock_uncertainty_ns >= cfg_.deadline_ns)
        throw std::invalid_argument("controller config: need deadline_ns > 0, chunk_interval_ns >= 0, "
                                    "max_period_ns > 0, 0 <= clock_uncertainty_ns < deadline_ns");
    const TokenizerConfig& t = cfg_.tokenizer;
    if (cfg_.action && (cfg_.action->names != t.names || cfg_.action->horizon != t.horizon))
        throw std::invalid_argument("controller config: the action spec's names/horizon differ from "
                                    "the tokenizer's: describe the same axes and chunk length in both");
    tokenizer_hash_ = t.hash();
    if (cfg_.action) action_hash_ = cfg_.action->hash();
    for (size_t d = 0; d < t.dim(); ++d) bin_width_.push_back((t.high[d] - t.low[d]) / double(t.bins));
    for (const char* c : COUNTERS) counters_.emplace_back(c, 0);
    chunk_.waypoints.assign(t.horizon, std::vector<double>(t.dim(), 0.0));
    chunk_.got.assign(t.horizon, false);
}

uint64_t& ChunkRules::counter(const std::string& name) {
    for (auto& kv : counters_)
        if (kv.first == name) return kv.second;
    throw std::invalid_argument("no counter " + name);
}

std::string ChunkRules::on_waypoint(const Envelope& env, int64_t now) {
    auto captured = wire::get_stamp(env.stamps, "capture");
    if (awaited_ && captured && *captured == awaited_->first) awaited_.reset();  // answered
    std::vector<double> wp;
    std::string why = check(env, now, wp);
    const Value* named = env.body.get("conditioned");
    if (why.empty() && named) {  // a new chunk joins only the plan it names
        int64_t capture = *wire::get_stamp(env.stamps, "capture");
        const Chunk& c = chunk_;
        bool in_use = c.keyed && c.src == env.src && c.cycle == env.body.get("cycle")->u &&
                      c.capture_ns == capture;
        bool older = c.keyed && capture < c.capture_ns;  // add() rejects it as stale
        if (!in_use && !older && !joins(*named, capture)) why = "prefix_mismatch";
    }
    if (why.empty()) why = add(env, wp);
    if (why.empty()) {
        if (named && chunk_.received == 1) ++counter("chunks_conditioned");
        if (chunk_.received == 1) new_chunk(env.body, chunk_.capture_ns);
        take(now);
        return "waypoints_accepted";
    }
    if (why == LATE) {
        late(env);
        return "rejected_stale";
    }
    ++counter(why);
    return why;
}

// check -> assemble -> apply, as controllers/node.py: the first failing rule names the counter.
std::string ChunkRules::check(const Envelope& env, int64_t now, std::vector<double>& wp) {
    const Value& b = env.body;
    if (b.get("dest")->s != cfg_.robot) return "rejected_dest";
    const Value* tokens = b.get("tokens");
    const std::string& want = tokens ? tokenizer_hash_ : action_hash_;
    if (want.empty() || b.get("spec")->s != want) return "rejected_hash";
    auto capture = wire::get_stamp(env.stamps, "capture");
    if (!capture || *capture - now > cfg_.clock_uncertainty_ns) return "rejected_bad";  // none, or future
    if (now - *capture > cfg_.deadline_ns && now - *capture >= window(b)) return LATE;
    const int64_t max_p = cfg_.max_period_ns;
    if (b.get("count")->u > cfg_.tokenizer.horizon || b.get("period_ns")->u > uint64_t(max_p) ||
        b.get("start_ns")->u > uint64_t(max_p))
        return "rejected_bad";
    const wire::NdArray& values = b.get("values")->arr;
    const size_t dim = cfg_.tokenizer.dim();
    if (values.dims.size() != 1 || values.dims[0] != dim) return "rejected_bad";
    wp.assign(dim, 0.0);
    if (!tokens) {  // a continuous chunk: its values are the truth
        for (size_t d = 0; d < dim; ++d) wp[d] = values.real(d);
    } else {  // tokens are the truth; values must be their bin centres within half a bin
        const wire::NdArray& t = tokens->arr;
        if (t.dims.size() != 1 || t.dims[0] != dim) return "rejected_bad";
        const TokenizerConfig& tc = cfg_.tokenizer;
        for (size_t d = 0; d < dim; ++d) {
            if (!t.integer_in(d, 0, int64_t(tc.bins) - 1)) return "rejected_bad";
            float centre = float(tc.low[d] + (double(t.integer(d)) + 0.5) * bin_width_[d]);
            float diff = std::fabs(float(values.real(d)) - centre);  // float32, as numpy
            if (double(diff) > bin_width_[d] / 2 + 1e-6) return "rejected_bad";
            wp[d] = centre;
        }
    }
    if (held()) return "rejected_hold";
    return "";
}

std::string ChunkRules::add(const Envelope& env, const std::vector<double>& wp) {
    const Value& b = env.body;
    Chunk& c = chunk_;
    int64_t capture = *wire::get_stamp(env.stamps, "capture");
    uint64_t cycle = b.get("cycle")->u, index = b.get("index")->u, count = b.get("count")->u;
    int64_t period = int64_t(b.get("period_ns")->u), start = int64_t(b.get("start_ns")->u);
    // the key has capture too: a restarted policy may reuse cycles
    bool same = c.keyed && c.src == env.src && c.cycle == cycle && c.capture_ns == capture;
    if (!same) {
        if (c.keyed && capture < c.capture_ns) return "rejected_stale";  // older than the one in use
        c.keyed = true;
        c.src = env.src;
        c.cycle = cycle;
        c.capture_ns = capture;
        c.count = count;
        c.period_ns = period;
        c.start_ns = start;
        c.window_ns = window(b);
        c.stamps = env.stamps;
        c.received = c.ready = c.applied = 0;
        std::fill(c.got.begin(), c.got.end(), false);
    } else if (count != c.count || period != c.period_ns || start != c.start_ns || c.got[index]) {
        return "rejected_bad";  // inconsistent with its chunk, or a repeat
    }
    c.waypoints[index] = wp;
    c.got[index] = true;
    ++c.received;
    while (c.ready < c.count && c.got[c.ready]) ++c.ready;
    return "";
}

void ChunkRules::take(int64_t now) {
    Chunk& c = chunk_;
    if (c.received == 1) {  // the first waypoint of a new chunk: a fresh one
        last_fresh_ns_ = now;
        ++counter("chunks_accepted");
    }
    ++counter("waypoints_accepted");
    if (c.ready == c.applied) return;  // past a gap: nothing new to track yet
    if (c.applied == 0) {  // the chunk's first setpoint goes out this tick
        if (!apply_pending_) state_before_ = state_;
        apply_pending_ = true;
    }
    c.applied = c.ready;
    state_ = "run";
}

void ChunkRules::late(const Envelope& env) {
    ++counter("rejected_stale");
    if (held()) return;
    ++counter("late_waypoints");
    int64_t capture = *wire::get_stamp(env.stamps, "capture");
    uint64_t cycle = env.body.get("cycle")->u;
    if (late_keyed_ && late_src_ == env.src && late_cycle_ == cycle && late_capture_ == capture) return;
    report_late(env.src, cycle, capture, env.stamps, double(env.body.get("index")->u));
}

void ChunkRules::report_late(const std::string& src, uint64_t cycle, int64_t capture,
                             const wire::Stamps& stamps, double index) {
    late_keyed_ = true;  // reported once: the cycle's later waypoints are late too
    late_src_ = src;
    late_cycle_ = cycle;
    late_capture_ = capture;
    if (auto recv = wire::get_stamp(stamps, "recv")) delay.record(*recv - capture);
    late_.push_back({cycle, stamps, "late_index", index});
}

std::vector<TraceRecord> ChunkRules::take_late() {
    std::vector<TraceRecord> out;
    out.swap(late_);
    return out;
}

void ChunkRules::commit(int64_t commit_ns) {
    int64_t age = commit_ns - chunk_.capture_ns;
    if (!apply_pending_ || age <= cfg_.deadline_ns || age < chunk_.window_ns) return;
    apply_pending_ = false;
    ++counter("late_applies");
    if (state_before_ == "run") ++counter("holds");
    state_ = state_before_ == "run" ? "hold" : state_before_;
    report_late(chunk_.src, chunk_.cycle, chunk_.capture_ns, chunk_.stamps, 0.0);
}

std::optional<TraceRecord> ChunkRules::applied(int64_t apply_ns) {
    if (!apply_pending_) return std::nullopt;
    apply_pending_ = false;
    int64_t e2e = apply_ns - chunk_.capture_ns;
    e2e_last_ns = e2e;
    e2e_max_ns = std::max(e2e_max_ns, e2e);
    delay.record(e2e);
    TraceRecord r{chunk_.cycle, chunk_.stamps, "e2e_ms", double(e2e) / 1e6,
                  double(chunk_.window_ns) / 1e6};
    wire::set_stamp(r.stamps, "apply", apply_ns);
    return r;
}

int64_t ChunkRules::window(const Value& b) const {
    // in doubles: n and the times are u64 off the wire; anything past its cap is capped
    double start = double(b.get("start_ns")->u), period = double(b.get("period_ns")->u);
    int64_t w = 0;
    if (const Value* named = b.get("conditioned")) {
        double x = start + double(named->get("n")->u) * period;
        w = x >= double(cfg_.rtc_max_ns) ? cfg_.rtc_max_ns : int64_t(x);
    }
    const Value* e = b.get("executes");
    if (e && cfg_.open_loop_ns > 0) {  // asked for: a robot that takes no asks ignores it
        double x = start + double(e->u - 1) * period;
        w = std::max(w, x >= double(cfg_.open_loop_ns) ? cfg_.open_loop_ns : int64_t(x));
    }
    return w;
}

// A new chunk was taken: its executed horizon ends the plan (the watchdog), its period ask
// is the one honoured (controllers/pace.py).
void ChunkRules::new_chunk(const Value& b, int64_t capture) {
    plan_end_.reset();
    if (cfg_.open_loop_ns <= 0) return;
    if (b.get("executes")) {
        ++counter("chunks_executes");
        double start = double(b.get("start_ns")->u), period = double(b.get("period_ns")->u);
        double x = start + double(b.get("executes")->u - 1) * period;
        plan_end_ = capture + (x >= double(cfg_.open_loop_ns) ? cfg_.open_loop_ns : int64_t(x));
    }
    const Value* asked = b.get("obs_period_ns");
    asked_ns_ = asked ? int64_t(std::min<uint64_t>(asked->u, uint64_t(cfg_.open_loop_ns))) : 0;
    asked_until_ = capture + 2 * asked_ns_ + cfg_.deadline_ns;
}

bool ChunkRules::hold_back(int64_t capture_ns) const {
    return asked_ns_ > 0 && last_obs_ && capture_ns < asked_until_ && capture_ns - *last_obs_ < asked_ns_;
}

// controllers/rtc.py joins(): tracking chunk `chunk`, holding from..from+n-1, `from` due with
// the new chunk's waypoint 0, and their float32 values hash to `hash`
bool ChunkRules::joins(const Value& named, int64_t capture) const {
    const Chunk& c = chunk_;
    uint64_t from = named.get("from")->u, n = named.get("n")->u;
    if (state_ != "run" || !c.keyed || c.applied == 0 || c.cycle != named.get("chunk")->u ||
        n > c.ready || from > c.ready - n)
        return false;
    int64_t p = c.period_ns, d = capture - c.capture_ns + p / 2;
    int64_t aligned = d >= 0 ? d / p : -((-d + p - 1) / p);  // floor, as Python's //
    if (aligned < 0 || uint64_t(aligned) != from) return false;
    std::vector<float> v;
    for (uint64_t i = from; i < from + n; ++i)
        for (double x : c.waypoints[i]) v.push_back(float(x));
    return prefix_hash(v) == named.get("hash")->s;
}

std::optional<Committed> ChunkRules::committed_prefix(int64_t capture_ns) const {
    const Chunk& c = chunk_;
    int64_t d = delay.estimate();
    if (state_ != "run" || !c.keyed || c.applied == 0 || d == 0) return std::nullopt;
    int64_t p = c.period_ns, s = c.start_ns;
    d = std::min<int64_t>(d + 2000000, cfg_.rtc_max_ns);
    int64_t x = capture_ns - c.capture_ns + p / 2;
    int64_t from = x >= 0 ? x / p : -((-x + p - 1) / p);
    int64_t n = d >= s ? (d - s) / p + 1 : 0;
    int64_t most = int64_t(c.waypoints.size()) - 1;  // the policy's max_committed, else H - 1
    if (cfg_.action && cfg_.action->max_committed) most = std::min(most, int64_t(*cfg_.action->max_committed));
    n = std::min({n, int64_t(c.ready) - from, most});
    if (from < 0 || n <= 0) return std::nullopt;
    Committed out{c.cycle, uint64_t(from), uint64_t(n), {}, c.capture_ns + s + from * p};
    for (int64_t i = from; i < from + n; ++i)
        for (double v : c.waypoints[size_t(i)]) out.values.push_back(float(v));
    return out;
}

void ChunkRules::hold(const std::string& state) {
    if (state_ == "run") ++counter("holds");  // transitions from tracking to holding
    apply_pending_ = false;  // a held robot sends no chunk's first setpoint
    state_ = state;
}

void ChunkRules::on_command(const std::string& cmd, int64_t) {
    ++counter("commands");
    if (cmd == "safe_hold") hold("safe_hold");
    else if (cmd == "clear" && state_ == "safe_hold") state_ = "hold";  // until the next fresh chunk
    else if (cmd == "stop") hold("stopped");
}

void ChunkRules::check_watchdog(int64_t now) {
    if (state_ != "run" || !last_fresh_ns_) return;
    if (plan_end_ ? now >= *plan_end_  // an executed horizon: until its last waypoint, never past
                  : now - *last_fresh_ns_ > cfg_.deadline_ns + cfg_.chunk_interval_ns)
        hold("hold");
}

SimAxes::SimAxes(size_t dim, double gain_per_s, double vel_limit)
    : pos(dim, 0.0), ref(dim, 0.0), gain_(gain_per_s), vmax_(vel_limit), from_(dim, 0.0) {}

void SimAxes::step(const ChunkRules& rules, int64_t now, double dt) {
    const auto& c = rules.chunk();
    if (!rules.holding() && c.applied > 0) {
        if (c.capture_ns != chunk_capture_ || c.cycle != chunk_cycle_) {  // a new chunk: start here
            chunk_capture_ = c.capture_ns;
            chunk_cycle_ = c.cycle;
            from_ = ref;
        }
        // the reference: from where the chunk started to waypoint 0, then waypoint to waypoint
        double t = double(now - c.capture_ns - c.start_ns) / double(c.period_ns);
        size_t last = c.applied - 1;
        for (size_t d = 0; d < pos.size(); ++d) {
            if (t >= double(last)) ref[d] = c.waypoints[last][d];
            else if (t < 0) ref[d] = c.waypoints[0][d] + (from_[d] - c.waypoints[0][d]) * std::min(1.0, -t);
            else {
                size_t i = size_t(t);
                double a = t - double(i);
                ref[d] = c.waypoints[i][d] * (1 - a) + c.waypoints[i + 1][d] * a;
            }
        }
    }  // holding: the reference stays where it is
    for (size_t d = 0; d < pos.size(); ++d) {
        double v = std::clamp(gain_ * (ref[d] - pos[d]), -vmax_, vmax_);
        pos[d] += v * dt;
    }
}

}  // namespace rtinfer
