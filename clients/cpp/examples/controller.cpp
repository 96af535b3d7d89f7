// An example robot-side controller in C++: follows action_chunk waypoints on simulated axes
// by the reference controller's rules (ChunkRules), answers the monitor's heartbeat pings,
// and publishes `trace` (apply stamp per cycle, late_index per late cycle) and `health`.
// One tick, as docs/robots.md's: messages -> read -> observe -> commit -> compute -> write ->
// trace. With --obs-hz, the observe step publishes the axes' positions as `obs` (values
// {"pos": float32 (D,)}, stamped capture) for a policy that reads them; without it the
// robot's observations come from elsewhere (a camera process). With --camera NAME
// --frame-hw H,W each obs also carries a uint8 [H, W, 3] frame of camera NAME (camera.hpp).
// --actions may name several inference nodes (a fleet's): the chunks for --robot are taken
// from whichever serves it, one node at a time (OneSource), by the same rules;
// chunks_from.SRC counts the chunks taken from each node.
//
//   rtinfer_controller --actions ipc:///tmp/act --control ipc:///tmp/ctl --publish ipc:///tmp/robot
//       --robot arm --tokenizer models/zoo/conveyor-v1/tokenizer.json --seconds 10
//   rtinfer_controller --actions ipc:///tmp/act-1 ipc:///tmp/act-2 --addressed ...
//
// SIGINT/SIGTERM stop it cleanly; on exit it prints (or writes --report) its counters as JSON.
#include <csignal>
#include <deque>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>

#include "rtinfer/bus.hpp"
#include "rtinfer/controller.hpp"
#include "rtinfer/json.hpp"
#include "rtinfer/one_source.hpp"
#include "camera.hpp"

using namespace rtinfer;
using wire::Entry;
using wire::Value;

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

struct Options {
    std::vector<std::string> actions;  // a SUB socket connected to each (a fleet's nodes)
    std::string camera;                // with frame_hw: each obs carries this camera's frame
    uint64_t frame_h = 0, frame_w = 0;
    std::string control, publish, robot, name = "controller", tokenizer, action_spec;
    std::string curve_secret, curve_map, report;
    double deadline_ms = 100, chunk_interval_ms = 0, rate_hz = 1000, health_hz = 10, seconds = -1;
    double beat_s = 1.0, obs_hz = 0;
    double open_loop_ms = 0;  // takes a node's asks under overload (0: none)
    bool addressed = false;  // take only chunks addressed to --robot (a node run with --address-chunks)
    bool rtc = false;        // each obs carries the committed prefix (real-time chunking)
};

[[noreturn]] void usage(const std::string& why) {
    std::cerr << "rtinfer_controller: " << why << "\n"
              << "usage: rtinfer_controller --actions EP [EP ...] --publish EP --robot NAME --tokenizer FILE\n"
                 "       [--control EP] [--name NAME] [--action-spec FILE] [--deadline-ms MS]\n"
                 "       [--chunk-interval-ms MS] [--rate-hz HZ] [--health-hz HZ] [--seconds S]\n"
                 "       [--curve-secret FILE --curve-map FILE] [--report FILE] [--addressed]\n"
                 "       [--obs-hz HZ [--camera NAME --frame-hw H,W] [--rtc] [--open-loop-ms MS]]\n";
    std::exit(2);
}

Options parse(int argc, char** argv) {
    Options o;
    std::string frame_hw;
    std::map<std::string, std::string*> text = {
        {"--camera", &o.camera}, {"--frame-hw", &frame_hw}, {"--control", &o.control}, {"--publish", &o.publish},
        {"--robot", &o.robot}, {"--name", &o.name}, {"--tokenizer", &o.tokenizer},
        {"--action-spec", &o.action_spec}, {"--curve-secret", &o.curve_secret},
        {"--curve-map", &o.curve_map}, {"--report", &o.report}};
    std::map<std::string, double*> num = {
        {"--deadline-ms", &o.deadline_ms}, {"--chunk-interval-ms", &o.chunk_interval_ms},
        {"--rate-hz", &o.rate_hz}, {"--health-hz", &o.health_hz}, {"--seconds", &o.seconds},
        {"--beat-s", &o.beat_s}, {"--obs-hz", &o.obs_hz}, {"--open-loop-ms", &o.open_loop_ms}};
    for (int k = 1; k < argc; ++k) {
        std::string a = argv[k];
        if (a == "--addressed" || a == "--rtc") {
            (a == "--rtc" ? o.rtc : o.addressed) = true;
            continue;
        }
        if (k + 1 >= argc) usage(a + " needs a value");
        if (a == "--actions") {  // repeatable, and takes several: --actions EP1 EP2 (as controllers.run)
            size_t before = o.actions.size();
            while (k + 1 < argc && std::strncmp(argv[k + 1], "--", 2) != 0) o.actions.push_back(argv[++k]);
            if (o.actions.size() == before) usage("--actions needs an endpoint");
            continue;
        }
        if (text.count(a)) *text[a] = argv[++k];
        else if (num.count(a)) {
            char* end;
            *num[a] = std::strtod(argv[++k], &end);
            if (*end) usage(a + " needs a number");
        } else usage("unknown option " + a);
    }
    if (o.actions.empty() || o.publish.empty() || o.robot.empty() || o.tokenizer.empty())
        usage("--actions, --publish, --robot and --tokenizer are required");
    if (o.deadline_ms <= 0 || o.rate_hz <= 0 || o.health_hz <= 0) usage("deadline, rate and health rate must be > 0");
    if (o.obs_hz < 0) usage("--obs-hz must be >= 0 (0: no observations)");
    if (o.rtc && o.obs_hz <= 0) usage("--rtc needs --obs-hz: the committed prefix goes out with each obs");
    if (o.open_loop_ms < 0 || (o.open_loop_ms > 0 && o.obs_hz <= 0))
        usage("--open-loop-ms needs --obs-hz and must be > 0: the robot says so in each obs");
    if (o.camera.empty() != frame_hw.empty()) usage("--camera and --frame-hw go together");
    if (!o.camera.empty()) {
        char* end;
        o.frame_h = std::strtoull(frame_hw.c_str(), &end, 10);
        if (*end == ',') o.frame_w = std::strtoull(end + 1, &end, 10);
        if (*end || !o.frame_h || !o.frame_w || o.frame_h * o.frame_w * 3 > wire::DEFAULT_MAX_BYTES)
            usage("--frame-hw wants H,W (rows, columns), both > 0, at most 4 MiB of pixels: e.g. 224,224");
        if (!wire::valid_name(o.camera)) usage("--camera must be a name (printable ASCII, no space)");
        if (o.obs_hz <= 0) usage("--camera needs --obs-hz: a frame goes out with each observation");
    }
    return o;
}

// The rules' counters, OneSource's, and chunks_from.SRC, the chunks taken from each policy
// node (their names are kept in `keep` until the message is sent).
Value counters_map(const ChunkRules& rules, const OneSource& follow,
                   const std::map<std::string, uint64_t>& chunks_from, std::deque<std::string>& keep) {
    Value m = Value::object({});
    for (const auto& kv : rules.counters()) m.map.push_back({Value::str(kv.first), Value::uinteger(kv.second)});
    m.map.push_back({Value::str("chunks_other_source"), Value::uinteger(follow.chunks_other_source)});
    m.map.push_back({Value::str("source_switches"), Value::uinteger(follow.source_switches)});
    for (const auto& kv : chunks_from) {
        keep.push_back("chunks_from." + kv.first);
        m.map.push_back({Value::str(keep.back()), Value::uinteger(kv.second)});
    }
    return m;
}

// Values view their strings: `keep` holds the ones built here until the message is sent (a
// deque, so adding one never moves the others).
Value trace_body(const std::string& node, const TraceRecord& r, std::deque<std::string>& keep) {
    Value stamps = Value::object({});
    for (const auto& kv : r.stamps) stamps.map.push_back({Value::str(kv.first), Value::integer(kv.second)});
    keep.push_back(r.field);
    Value fields = Value::object({{Value::str(keep.back()), Value::real(r.value)}});
    if (r.window_ms > 0) fields.map.push_back({Value::str("window_ms"), Value::real(r.window_ms)});
    return Value::object({{Value::str("node"), Value::str(node)},
                          {Value::str("cycle"), Value::uinteger(r.cycle)},
                          {Value::str("stamps"), stamps},
                          {Value::str("fields"), fields}});
}

}  // namespace

int main(int argc, char** argv) {
    Options o = parse(argc, argv);
    ControllerConfig cfg;
    std::map<std::string, bus::CurveConfig> sub_curve;
    std::optional<bus::CurveConfig> pub_curve;
    try {
        cfg.name = o.name;
        cfg.robot = o.robot;
        cfg.deadline_ns = int64_t(o.deadline_ms * 1e6);
        cfg.chunk_interval_ns = int64_t(o.chunk_interval_ms * 1e6);
        cfg.open_loop_ns = int64_t(o.open_loop_ms * 1e6);
        cfg.tokenizer = TokenizerConfig::from_json(json::parse_file(o.tokenizer));
        if (!o.action_spec.empty()) cfg.action = ActionSpec::from_json(json::parse_file(o.action_spec));
        std::vector<std::string> connects = o.actions;
        connects.push_back(o.control);
        for (const auto& ep : connects)
            if (!ep.empty())
                if (auto c = bus::curve_for(ep, false, o.curve_secret, o.curve_map)) sub_curve[ep] = *c;
        pub_curve = bus::curve_for(o.publish, true, o.curve_secret, o.curve_map);
    } catch (const std::exception& e) {
        usage(e.what());
    }
    ChunkRules rules(cfg);
    SimAxes axes(cfg.tokenizer.dim());
    zmq::context_t ctx(1);
    std::vector<std::string> eps = o.actions;
    if (!o.control.empty()) eps.push_back(o.control);
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    int rc = 0;
    std::map<std::string, uint64_t> hb = {{"pings", 0}, {"echoes", 0}, {"beats", 0}, {"dropped", 0}};
    {
        std::map<std::string, std::string> to;
        if (o.addressed) to["action_chunk"] = o.robot;
        bus::Subscriber sub(ctx, eps, {"action_chunk", "command", "heartbeat"}, 1000,
                            wire::DEFAULT_MAX_BYTES, sub_curve, to);
        bus::Publisher pub(ctx, o.publish, o.robot, true, 1000, pub_curve);
        std::cout << o.name << ": ready (robot " << o.robot << ", tokenizer " << cfg.tokenizer.hash()
                  << ", publishing on " << pub.endpoint << ")" << std::endl;
        const int64_t period = int64_t(1e9 / o.rate_hz), health_period = int64_t(1e9 / o.health_hz);
        const int64_t beat_period = int64_t(o.beat_s * 1e9);
        const int64_t obs_period = o.obs_hz > 0 ? int64_t(1e9 / o.obs_hz) : 0;
        int64_t start = wire::now_ns(), next = start, next_health = start, next_beat = start;
        int64_t next_obs = start;
        std::vector<float> obs_pos(axes.pos.size());
        uint64_t obs_sent = 0, committed_sent = 0, obs_held_rtc = 0, obs_slowed = 0;
        std::optional<example::Camera> camera;
        if (!o.camera.empty()) camera.emplace(o.camera, o.frame_h, o.frame_w);
        // in a fleet, one node's chunks at a time; the chunks taken from each node (src)
        OneSource follow(cfg.deadline_ns + cfg.chunk_interval_ns);
        std::map<std::string, uint64_t> chunks_from;
        const int64_t end = o.seconds >= 0 ? start + int64_t(o.seconds * 1e9) : INT64_MAX;
        std::deque<std::string> keep;
        uint64_t publish_errors = 0;
        // a body this program built wrongly: counted and said once, never the end of the loop
        auto send = [&](const std::string& topic, const Value& body, wire::Stamps stamps = {}) {
            try {
                return pub.publish(topic, body, std::move(stamps));
            } catch (const wire::WireError& e) {
                if (publish_errors++ == 0) std::cerr << o.name << ": " << topic << " not sent: " << e.what() << std::endl;
                return false;
            }
        };
        while (!g_stop && rules.state() != "stopped" && wire::now_ns() < end) {
            int64_t now = wire::now_ns();
            // update(): drain what arrived, at most 32 messages a tick
            for (int k = 0; k < 32; ++k) {
                auto msg = sub.recv(0);
                if (!msg) break;
                const wire::Envelope& env = msg->env;
                if (env.topic == "action_chunk") {
                    if (env.body.get("dest")->s == o.robot &&
                        !follow.take(env.src, *wire::get_stamp(env.stamps, "recv")))
                        continue;  // another node's, while the one followed serves it: counted
                    // the clock read now, not the tick's start: a chunk stamped after the start
                    // and drained later in a preempted tick is not from the future
                    if (rules.on_waypoint(env, wire::now_ns()) == "waypoints_accepted" &&
                        rules.chunk().received == 1)
                        ++chunks_from[env.src];
                } else if (env.topic == "command") {
                    rules.on_command(std::string(env.body.get("cmd")->s), now);
                } else if (!env.body.get("echo") && env.body.get("node")->s != o.name) {
                    ++hb["pings"];  // a ping: echo it (rtinfer/transport/heartbeat.py)
                    int64_t t2 = wire::now_ns(), t1 = *wire::get_stamp(env.stamps, "recv");
                    Value echo = Value::object({{Value::str("src"), Value::str(env.src)},
                                                {Value::str("seq"), Value::uinteger(env.seq)},
                                                {Value::str("sent_ns"), *env.body.get("sent_ns")},
                                                {Value::str("recv_ns"), Value::integer(std::min(t1, t2))}});
                    Value body = Value::object({{Value::str("node"), Value::str(o.name)},
                                                {Value::str("sent_ns"), Value::integer(t2)},
                                                {Value::str("echo"), echo}});
                    ++hb[send("heartbeat", body) ? "echoes" : "dropped"];
                }
            }
            rules.check_watchdog(now);
            // read() and observe(): the simulated axes are read where they are; when an
            // observation is due, their positions go out as `obs`, captured now
            if (obs_period > 0 && now >= next_obs && o.rtc && rules.awaiting(now)) {
                next_obs = now + obs_period;  // one obs with a prefix in flight at a time
                ++obs_held_rtc;
            } else if (obs_period > 0 && now >= next_obs && rules.hold_back(now)) {
                next_obs = now + obs_period;  // a node under overload asked for fewer
                ++obs_slowed;
            } else if (obs_period > 0 && now >= next_obs) {
                next_obs = now + obs_period;
                for (size_t d = 0; d < axes.pos.size(); ++d) obs_pos[d] = float(axes.pos[d]);
                Value values = Value::object({{Value::str("pos"), Value::ndarray(
                    wire::DType::F32, {uint64_t(obs_pos.size())}, obs_pos.data(),
                    obs_pos.size() * sizeof(float))}});
                Value body = Value::object({{Value::str("values"), values},
                                            {Value::str("ints"), Value::object({})}});
                if (camera) {
                    camera->capture(now);
                    body.map.push_back({Value::str("frames"), camera->frames()});
                }
                std::optional<Committed> committed = o.rtc ? rules.committed_prefix(now) : std::nullopt;
                if (committed) {  // the plan's waypoints due before this obs's chunk can land
                    const Committed& c = *committed;
                    body.map.push_back({Value::str("committed"), Value::object({
                        {Value::str("chunk"), Value::uinteger(c.chunk)},
                        {Value::str("from"), Value::uinteger(c.from)},
                        {Value::str("values"), Value::ndarray(wire::DType::F32, {c.n, c.values.size() / c.n},
                                                              c.values.data(), c.values.size() * sizeof(float))},
                        {Value::str("start_ns"), Value::integer(c.start_ns)}})});
                }
                if (cfg.open_loop_ns > 0)  // this robot takes a node's asks (docs/wire.md 5)
                    body.map.push_back({Value::str("open_loop_ns"), Value::integer(cfg.open_loop_ns)});
                if (send("obs", body, {{"capture", now}})) {
                    ++obs_sent;
                    rules.obs_sent(now);
                    int64_t until = now + cfg.deadline_ns;  // with --rtc its answer is awaited
                    if (committed) {
                        ++committed_sent;
                        until = std::max(until, committed->start_ns + int64_t(committed->n) *
                                                    rules.chunk().period_ns);
                    }
                    if (o.rtc) rules.sent(now, until);
                }
            }
            // commit, compute, write: a new chunk's first setpoint is committed now, or
            // dropped if the tick's own work took it past the deadline; the axes follow it
            int64_t applied_ns = wire::now_ns();
            rules.commit(applied_ns);
            axes.step(rules, now, double(period) / 1e9);
            // trace: trace records, health, the periodic heartbeat
            keep.clear();
            for (const auto& r : rules.take_late()) send("trace", trace_body(o.name, r, keep));
            if (auto r = rules.applied(applied_ns)) send("trace", trace_body(o.name, *r, keep));
            if (now >= next_health) {
                next_health = now + health_period;
                Value gauges = Value::object({{Value::str("e2e_last_ms"), Value::real(rules.e2e_last_ns / 1e6)},
                                              {Value::str("e2e_max_ms"), Value::real(rules.e2e_max_ns / 1e6)},
                                              {Value::str("holding"), Value::real(rules.holding() ? 1 : 0)}});
                for (size_t d = 0; d < axes.pos.size(); ++d) {
                    keep.push_back("pos_" + cfg.tokenizer.names[d]);
                    gauges.map.push_back({Value::str(keep.back()), Value::real(axes.pos[d])});
                }
                Value body = Value::object({{Value::str("node"), Value::str(o.name)},
                                            {Value::str("state"), Value::str(rules.state())},
                                            {Value::str("counters"), counters_map(rules, follow, chunks_from, keep)},
                                            {Value::str("gauges"), gauges}});
                send("health", body);
            }
            if (beat_period > 0 && now >= next_beat) {
                next_beat = now + beat_period;
                ++hb["beats"];
                send("heartbeat", Value::object({{Value::str("node"), Value::str(o.name)},
                                                        {Value::str("sent_ns"), Value::integer(now)}}));
            }
            ++rules.counter("ticks");
            next += period;
            int64_t after = wire::now_ns();
            if (after > next) {  // overran: count it, and never try to catch up in a burst
                ++rules.counter("late_ticks");
                next = after;
                continue;
            }
            timespec ts{time_t(next / 1000000000), long(next % 1000000000)};
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
        }
        std::string out = "{\"node\": " + json::quote(o.name) + ", \"state\": " + json::quote(rules.state()) +
                          ", \"counters\": {";
        bool first = true;
        auto add = [&](const std::string& k, uint64_t v) {
            out += (first ? "" : ", ") + json::quote(k) + ": " + std::to_string(v);
            first = false;
        };
        for (const auto& kv : rules.counters()) add(kv.first, kv.second);
        for (const auto& kv : sub.counters) add("sub." + kv.first, kv.second);
        for (const auto& kv : hb) add("heartbeat." + kv.first, kv.second);
        add("pub.sent", pub.sent);
        add("pub.dropped", pub.dropped);
        add("pub.errors", publish_errors);
        add("obs_sent", obs_sent);
        add("committed_sent", committed_sent);
        add("obs_held_rtc", obs_held_rtc);
        add("obs_slowed", obs_slowed);
        add("chunks_other_source", follow.chunks_other_source);
        add("source_switches", follow.source_switches);
        for (const auto& kv : chunks_from) add("chunks_from." + kv.first, kv.second);
        out += "}, \"e2e_max_ms\": " + std::to_string(rules.e2e_max_ns / 1e6) + ", \"pos\": [";
        for (size_t d = 0; d < axes.pos.size(); ++d) out += (d ? ", " : "") + std::to_string(axes.pos[d]);
        out += "]}\n";
        if (o.report.empty()) std::cout << out;
        else std::ofstream(o.report) << out;
        // a moment for libzmq to send the last messages (the sockets close with linger 0)
        timespec pause{0, 100000000};
        nanosleep(&pause, nullptr);
    }
    return rc;
}
