// `vwt serve`: an OpenAI-compatible HTTP server over the decode engine (serve_engine.hpp), on
// Debian's cpp-httplib (a maintained, packaged HTTP/1.1 server with chunked responses for
// server-sent events and a thread pool; llama.cpp's server is built on the same library).
// Endpoints: POST /v1/completions and /v1/chat/completions (streamed as server-sent events when
// "stream" is true), GET /v1/models, /health and /metrics (Prometheus text).
#include <cerrno>
#include <charconv>
#include <csignal>
#include <ctime>
#include <iostream>
#include <optional>

#include <netdb.h>
#include <nlohmann/json.hpp>
#include <pthread.h>
#include <sys/socket.h>

#include <vwt/vwt.hpp>

#include "commands.hpp"
#include "device_flags.hpp"
#include "model_text.hpp"
#include "serve_engine.hpp"

// after Eigen (through vwt): the headers httplib pulls in define macros that Eigen's names collide with
#include <httplib.h>

namespace vwt::cli {

namespace {

using json = nlohmann::json;

// A 4xx answer: the request was wrong, and `message` says how.
struct bad_request {
    int status;
    std::string message;
};

void send_error(httplib::Response& res, int status, const std::string& message) {
    const char* type = status == 503 ? "server_overloaded" : status >= 500 ? "server_error" : "invalid_request_error";
    res.status = status;
    res.set_content(json{{"error", {{"message", message}, {"type", type}, {"code", status}}}}.dump(), "application/json");
}

struct server_options {
    std::string model, host = "127.0.0.1", name;
    int port = 8080, slots = 4, queue = 64, max_prompt = 0, max_tokens = 0, http_threads = 0;
    device_flags device;
};

// JSON text that is valid UTF-8 whatever the bytes (a byte-level model may emit any).
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// A completion's text as its tokens arrive: decoded into whole characters and ended by a stop token
// (which adds no text) or by the first occurrence of a stop string (the text ends before it). A
// tail that may still grow into a stop string is held back until it cannot.
class completion_text {
public:
    completion_text(const model_text& codec, std::vector<int> stop_tokens, std::vector<std::string> stops)
        : decoder_(codec), stop_tokens_(std::move(stop_tokens)), stops_(std::move(stops)) {}

    // Takes the next token (none once stopped); returns the text that became final.
    std::string push(int token) {
        if (stopped_) return {};
        ++tokens_;
        if (std::find(stop_tokens_.begin(), stop_tokens_.end(), token) != stop_tokens_.end()) {
            stopped_ = true;
            pending_ += decoder_.finish();
            return release(true);
        }
        pending_ += decoder_.push(token);
        return release(false);
    }
    // After the last token: the rest of the text.
    std::string finish() {
        if (stopped_) return {};
        pending_ += decoder_.finish();
        return release(true);
    }
    bool stopped() const { return stopped_; }
    int tokens() const { return tokens_; }  // taken, the stopping one included

private:
    std::string release(bool last) {
        std::size_t cut = std::string::npos;
        for (const auto& s : stops_) cut = std::min(cut, pending_.find(s));
        if (cut != std::string::npos) {
            stopped_ = true;
            pending_.resize(cut);
            return std::exchange(pending_, {});
        }
        std::size_t hold = 0;
        if (!last)
            for (const auto& s : stops_)
                for (std::size_t n = std::min(s.size() - 1, pending_.size()); n > hold; --n)
                    if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
                        hold = n;
                        break;
                    }
        std::string out = pending_.substr(0, pending_.size() - hold);
        pending_.erase(0, pending_.size() - hold);
        return out;
    }

    model_text::stream decoder_;
    std::vector<int> stop_tokens_;
    std::vector<std::string> stops_;
    std::string pending_;
    int tokens_ = 0;
    bool stopped_ = false;
};

// Moves the request's new tokens (waiting up to `wait` for them) through `text` until it stops,
// keeping them in `taken`; returns the text that became final. At a stop string the request is
// marked for the engine, which ends it at its next step.
std::string take_text(serve_request& r, completion_text& text, std::vector<sampled_token>& taken, std::chrono::milliseconds wait) {
    std::string piece;
    for (auto& t : r.take(wait)) {
        if (text.stopped()) break;
        piece += text.push(t.id);
        taken.push_back(std::move(t));
    }
    if (text.stopped()) r.stop_reached = true;
    return piece;
}

// Whether a request's client is still connected, for the handlers that answer only at the end
// (httplib 0.11 tells a handler nothing about its connection). The connection's socket is the one
// whose two addresses are the request's (a TCP connection is unique by them, and its socket stays
// open while the handler runs); a peek that reads end-of-stream or an error means the client left.
// The scan of /proc/self/fd runs again at each check until it finds the socket: other connections
// open and close descriptors meanwhile, and a scan they interrupt stops early (a cancelled request
// once ran to its end that way). Where /proc/self/fd is missing, the client always reads as
// connected.
class client_connection {
public:
    explicit client_connection(const httplib::Request& req)
        : local_(req.local_addr, req.local_port), remote_(req.remote_addr, req.remote_port), fd_(find()) {}
    bool closed() {
        if (fd_ < 0) fd_ = find();
        if (fd_ < 0) return false;
        char byte = 0;
        const auto n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }

private:
    int find() const {
        std::error_code ec;
        for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) {
            const std::string name = it->path().filename().string();
            int fd = -1;
            if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc()) continue;
            if (address(fd, false) == local_ && address(fd, true) == remote_) return fd;
        }
        return -1;
    }
    static std::pair<std::string, int> address(int fd, bool peer) {
        sockaddr_storage a{};
        socklen_t length = sizeof a;
        auto* p = reinterpret_cast<sockaddr*>(&a);
        if ((peer ? ::getpeername(fd, p, &length) : ::getsockname(fd, p, &length)) != 0) return {"", -1};
        char host[NI_MAXHOST], port[NI_MAXSERV];
        if (::getnameinfo(p, length, host, sizeof host, port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV) != 0) return {"", -1};
        return {host, std::atoi(port)};
    }
    std::pair<std::string, int> local_, remote_;
    int fd_ = -1;
};

template <class B>
class server {
public:
    server(const server_options& o, const model<B>& m, const typename B::context& ctx)
        : o_(o), model_(m), codec_(o.model, m.vocab()),
          context_(m.schedule().dims.context),
          max_prompt_(o.max_prompt > 0 ? std::min(o.max_prompt, context_ - 1) : context_ - 1),
          max_tokens_(o.max_tokens > 0 ? o.max_tokens : context_),
          engine_(m, ctx, o.slots, o.queue, max_prompt_, o.device.kv_dtype()) {
        if (o.max_prompt < 0 || o.max_tokens < 0) detail::fail("--max-prompt and --max-tokens: must be >= 0");
        name_ = o.name.empty() ? std::filesystem::path(o.model).filename().string() : o.name;
        if (name_.empty()) name_ = "vwt";
        const int threads = o.http_threads > 0 ? o.http_threads : o.slots + 8;
        http_.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
        http_.set_payload_max_length(1 << 20);
        http_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
            res.set_content(dump({{"status", "ok"}, {"slots", engine_.slots()}}), "application/json");
        });
        http_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
            res.set_content(dump({{"object", "list"},
                                  {"data", json::array({{{"id", name_}, {"object", "model"}, {"created", started_}, {"owned_by", "vwt"},
                                                         {"context_length", context_}}})}}),
                            "application/json");
        });
        http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) { res.set_content(metrics(), "text/plain; version=0.0.4"); });
        http_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { handle(req, res, false); });
        http_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { handle(req, res, true); });
        http_.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
            if (!res.body.empty()) return;  // a handler's own error
            const int status = res.status;
            send_error(res, status, status == 404 ? "no route " + req.method + " " + req.path : "HTTP status " + std::to_string(status));
        });
        http_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr e) {
            std::string what = "internal error";
            try {
                std::rethrow_exception(e);
            } catch (const std::exception& x) {
                what = x.what();
            } catch (...) {
            }
            send_error(res, 500, what);
        });
    }

    // Serves until stop() (from another thread).
    void listen() {
        if (!http_.bind_to_port(o_.host, o_.port)) detail::fail("--port: cannot listen on ", o_.host, ":", o_.port);
        std::cout << "vwt serve: " << name_ << " on http://" << o_.host << ":" << o_.port << " (" << engine_.slots() << " slots, queue "
                  << o_.queue << ", prompts up to " << max_prompt_ << " tokens)" << std::endl;
        http_.listen_after_bind();
    }
    void stop() { http_.stop(); }

private:
    // The request's fields, checked; throws bad_request.
    std::shared_ptr<serve_request> parse(const json& body, bool chat) {
        if (!body.is_object()) throw bad_request{400, "the body must be a JSON object"};
        const auto number = [&](const char* key, double fallback, double lo, double hi) {
            if (!body.contains(key) || body[key].is_null()) return fallback;
            if (!body[key].is_number()) throw bad_request{400, std::string("'") + key + "' must be a number"};
            const double v = body[key].get<double>();
            if (!(v >= lo && v <= hi)) throw bad_request{400, std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]"};
            return v;
        };
        const auto integer = [&](const char* key, long long fallback, long long lo, long long hi) {
            if (!body.contains(key) || body[key].is_null()) return fallback;
            if (!body[key].is_number_integer()) throw bad_request{400, std::string("'") + key + "' must be an integer"};
            const auto v = body[key].get<long long>();
            if (v < lo || v > hi) throw bad_request{400, std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]"};
            return v;
        };
        if (integer("n", 1, 1, 1) != 1) throw bad_request{400, "'n' must be 1"};
        auto r = std::make_shared<serve_request>();
        std::string text;
        if (chat) {
            if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
                throw bad_request{400, "'messages' must be a non-empty array"};
            // The chat template (the models here are not instruction-tuned): "role: content" lines,
            // then "assistant:" for the reply.
            for (const auto& m : body["messages"]) {
                if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") || !m["content"].is_string())
                    throw bad_request{400, "each message must be an object with string 'role' and 'content'"};
                const auto role = m["role"].get<std::string>();
                if (role != "system" && role != "user" && role != "assistant")
                    throw bad_request{400, "message role '" + role + "' (system, user, assistant)"};
                text += role + ": " + m["content"].get<std::string>() + "\n";
            }
            text += "assistant:";
        } else {
            if (!body.contains("prompt")) throw bad_request{400, "'prompt' is missing"};
            const auto& p = body["prompt"];
            if (p.is_string()) {
                text = p.get<std::string>();
            } else if (p.is_array() && !p.empty() && std::all_of(p.begin(), p.end(), [](const json& t) { return t.is_number_integer(); })) {
                for (const auto& t : p) {
                    const auto id = t.get<long long>();
                    if (id < 0 || id >= model_.vocab())
                        throw bad_request{400, "prompt token " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(model_.vocab()) + ")"};
                    r->prompt.push_back(static_cast<int>(id));
                }
            } else {
                throw bad_request{400, "'prompt' must be a string or a non-empty array of token ids"};
            }
        }
        if (r->prompt.empty()) r->prompt = codec_.encode(text);
        if (r->prompt.empty()) throw bad_request{400, "the prompt is empty"};
        if (static_cast<int>(r->prompt.size()) > max_prompt_)
            throw bad_request{400, "the prompt has " + std::to_string(r->prompt.size()) + " tokens; this server takes at most " + std::to_string(max_prompt_)};
        const long long room = context_ - static_cast<long long>(r->prompt.size());
        const long long cap = std::min<long long>(max_tokens_, room);
        r->max_tokens = static_cast<int>(integer(chat && body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens",
                                                 std::min<long long>(chat ? cap : 16, cap), 1, std::numeric_limits<int>::max()));
        if (r->max_tokens > cap)
            throw bad_request{400, "max_tokens " + std::to_string(r->max_tokens) + " with a prompt of " + std::to_string(r->prompt.size()) +
                                       " tokens: at most " + std::to_string(cap) + " (context " + std::to_string(context_) + ", --max-tokens " +
                                       std::to_string(max_tokens_) + ")"};
        r->sampling.temperature = number("temperature", 1.0, 0.0, 100.0);
        r->sampling.top_p = number("top_p", 1.0, 0.0, 1.0);
        r->sampling.top_k = static_cast<int>(integer("top_k", 0, 0, model_.vocab()));
        r->sampling.min_p = number("min_p", 0.0, 0.0, 1.0);
        r->sampling.repetition_penalty = number("repeat_penalty", 1.0, 0.0, 100.0);
        r->sampling.repetition_window = static_cast<int>(integer("repeat_last_n", 64, 0, context_));
        try {
            r->sampling.validate();
        } catch (const error& e) {
            throw bad_request{400, e.what()};
        }
        r->seed = static_cast<std::uint64_t>(integer("seed", 0, std::numeric_limits<long long>::min(), std::numeric_limits<long long>::max()));
        if (body.contains("stream") && !body["stream"].is_boolean()) throw bad_request{400, "'stream' must be true or false"};
        if (body.contains("stop") && !body["stop"].is_null()) {
            const auto& stop = body["stop"];
            const json list = stop.is_array() ? stop : json::array({stop});
            if (list.size() > 4) throw bad_request{400, "'stop' has " + std::to_string(list.size()) + " strings; at most 4"};
            for (const auto& s : list) {
                if (!s.is_string() || s.get<std::string>().empty())
                    throw bad_request{400, "'stop' must be a non-empty string or an array of up to 4 of them"};
                r->stop_strings.push_back(s.get<std::string>());
            }
        }
        if (chat) {
            if (body.contains("logprobs") && !body["logprobs"].is_null() && !body["logprobs"].is_boolean())
                throw bad_request{400, "'logprobs' must be true or false"};
            const bool wanted = body.contains("logprobs") && body["logprobs"].is_boolean() && body["logprobs"].get<bool>();
            const auto top = integer("top_logprobs", -1, 0, 20);
            if (top >= 0 && !wanted) throw bad_request{400, "'top_logprobs' needs 'logprobs': true"};
            r->logprobs = wanted ? static_cast<int>(std::max<long long>(top, 0)) : -1;
        } else {
            r->logprobs = static_cast<int>(integer("logprobs", -1, 0, 5));
        }
        // OpenAI's fields that would change the answer and that this server does not implement: an
        // error, never silently ignored.
        const auto unsupported = [&](const char* key, const json& neutral) {
            if (body.contains(key) && !body[key].is_null() && body[key] != neutral)
                throw bad_request{400, std::string("'") + key + "' is not supported by this server (only " + neutral.dump() + ")"};
        };
        unsupported("echo", false);
        unsupported("best_of", 1);
        unsupported("suffix", "");
        unsupported("logit_bias", json::object());
        unsupported("presence_penalty", 0);
        unsupported("frequency_penalty", 0);
        unsupported("tools", json::array());
        unsupported("functions", json::array());
        unsupported("response_format", json{{"type", "text"}});
        if (model_.config().eos_token_id >= 0) r->stop_tokens = {model_.config().eos_token_id};
        return r;
    }

    // The log-probabilities of `tokens` in the API's two shapes: completions' parallel lists (text
    // offsets in bytes from `offset`), chat's list of objects with each token's bytes. So that no two
    // tokens read alike, a token that is not whole UTF-8 (a byte-level model's piece of a character)
    // reads "bytes:" and its bytes as \xNN, as in OpenAI's API, and one without bytes (a special
    // id) reads <|id|>.
    json logprobs_json(bool chat, const std::vector<sampled_token>& tokens, std::size_t& offset) const {
        const auto bytes = [](const std::string& s) {
            json b = json::array();
            for (unsigned char c : s) b.push_back(c);
            return b;
        };
        const auto label = [](int id, const std::string& text) {
            if (text.empty()) return "<|" + std::to_string(id) + "|>";
            if (report::valid_utf8(text) == text) return text;
            std::string escaped = "bytes:";
            for (unsigned char c : text) {
                static constexpr char hex[] = "0123456789abcdef";
                escaped += "\\x";
                escaped += hex[c >> 4];
                escaped += hex[c & 15];
            }
            return escaped;
        };
        if (chat) {
            json content = json::array();
            for (const auto& t : tokens) {
                json top = json::array();
                for (const auto& [id, logprob] : t.top) {
                    const std::string alternative = codec_.bytes_of(id);
                    top.push_back({{"token", label(id, alternative)}, {"logprob", logprob}, {"bytes", bytes(alternative)}});
                }
                const std::string text = codec_.bytes_of(t.id);
                content.push_back({{"token", label(t.id, text)}, {"logprob", t.logprob}, {"bytes", bytes(text)}, {"top_logprobs", top}});
            }
            return {{"content", content}};
        }
        json j = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()}, {"text_offset", json::array()}};
        for (const auto& t : tokens) {
            json top = json::object();
            for (const auto& [id, logprob] : t.top) top[label(id, codec_.bytes_of(id))] = logprob;
            const std::string text = codec_.bytes_of(t.id);
            j["tokens"].push_back(label(t.id, text));
            j["token_logprobs"].push_back(t.logprob);
            j["top_logprobs"].push_back(top);
            j["text_offset"].push_back(offset);
            offset += text.size();
        }
        return j;
    }

    json choice_chunk(bool chat, const std::string& text, const json& finish, bool first) const {
        json c = {{"index", 0}};
        if (chat) {
            json delta = json::object();
            if (first) delta["role"] = "assistant";
            if (!text.empty() || !first) delta["content"] = text;
            c["delta"] = delta;
        } else {
            c["text"] = text;
        }
        c["logprobs"] = nullptr;
        c["finish_reason"] = finish;
        return c;
    }

    // A completion is streamed as server-sent events: a chunk for each piece of text that became
    // final, then one with the finish reason and the usage, then [DONE].
    struct streamed_completion {
        completion_text text;
        bool first = true;
        std::size_t offset = 0;  // bytes of token text sent, for logprobs' text_offset
    };

    void handle(const httplib::Request& req, httplib::Response& res, bool chat) {
        json body = json::parse(req.body, nullptr, false);
        if (body.is_discarded()) return send_error(res, 400, "the body is not valid JSON");
        std::shared_ptr<serve_request> r;
        try {
            r = parse(body, chat);
        } catch (const bad_request& e) {
            return send_error(res, e.status, e.message);
        }
        if (!engine_.submit(r)) return send_error(res, 503, "the queue is full; try again later");
        const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(++next_id_);
        const json head = {{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", std::time(nullptr)}, {"model", name_}};
        const auto prompt_tokens = static_cast<int>(r->prompt.size());
        const auto usage = [prompt_tokens](int completion_tokens) {
            return json{{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens}, {"total_tokens", prompt_tokens + completion_tokens}};
        };
        // "stop" at a stop token or string, else "length" (or the server stopping)
        const auto finish_reason = [r](const completion_text& text) { return text.stopped() || r->finish_reason == "stop" ? "stop" : "length"; };
        if (body.value("stream", false)) {
            auto state = std::make_shared<streamed_completion>(streamed_completion{completion_text(codec_, r->stop_tokens, r->stop_strings)});
            res.set_header("Cache-Control", "no-cache");
            res.set_chunked_content_provider(
                "text/event-stream",
                [this, r, state, head, chat, usage, finish_reason](std::size_t, httplib::DataSink& sink) {
                    const auto send = [&](const json& j) {
                        const std::string event = "data: " + dump(j) + "\n\n";
                        return sink.write(event.data(), event.size());
                    };
                    if (!sink.is_writable()) {
                        r->cancelled = true;
                        return false;
                    }
                    std::vector<sampled_token> taken;
                    std::string piece = take_text(*r, state->text, taken, std::chrono::milliseconds(50));
                    const bool finished = state->text.stopped() || r->finished();
                    if (finished) piece += state->text.finish();
                    if (!piece.empty() || (state->first && chat) || (r->logprobs >= 0 && !taken.empty())) {
                        json j = head;
                        j["choices"] = json::array({choice_chunk(chat, piece, nullptr, state->first)});
                        if (r->logprobs >= 0) j["choices"][0]["logprobs"] = logprobs_json(chat, taken, state->offset);
                        state->first = false;
                        if (!send(j)) {
                            r->cancelled = true;
                            return false;
                        }
                    }
                    if (finished) {
                        if (!state->text.stopped() && r->finish_reason == "error") {  // the status is sent: an error event ends the stream
                            send(json{{"error", {{"message", r->error}, {"type", "server_error"}, {"code", 500}}}});
                            return false;
                        }
                        json j = head;
                        j["choices"] = json::array({choice_chunk(chat, "", finish_reason(state->text), false)});
                        if (chat) j["choices"][0]["delta"] = json::object();
                        j["usage"] = usage(state->text.tokens());
                        const std::string done = "data: [DONE]\n\n";
                        if (!send(j) || !sink.write(done.data(), done.size())) return false;
                        sink.done();
                    }
                    return true;
                },
                [r](bool success) {
                    if (!success) r->cancelled = true;  // the client went away: free the slot
                });
            return;
        }
        // Not streamed: the answer comes at the end, and the client is watched meanwhile.
        client_connection client(req);
        completion_text text(codec_, r->stop_tokens, r->stop_strings);
        std::string out;
        std::vector<sampled_token> taken;
        while (!text.stopped() && !r->finished()) {
            out += take_text(*r, text, taken, std::chrono::milliseconds(50));
            if (client.closed()) {
                r->cancelled = true;  // the engine frees the slot
                return;
            }
        }
        if (!text.stopped() && r->finish_reason == "error") return send_error(res, 500, r->error);
        out += text.finish();
        json j = head;
        j["object"] = chat ? "chat.completion" : "text_completion";
        json c = {{"index", 0}, {"finish_reason", finish_reason(text)}};
        if (chat) c["message"] = {{"role", "assistant"}, {"content", out}};
        else c["text"] = out;
        std::size_t offset = 0;
        c["logprobs"] = r->logprobs >= 0 ? logprobs_json(chat, taken, offset) : json(nullptr);
        j["choices"] = json::array({c});
        j["usage"] = usage(text.tokens());
        json ids = json::array();
        for (const auto& t : taken) ids.push_back(t.id);
        j["tokens"] = ids;  // vwt's extension: the completion's token ids
        res.set_content(dump(j), "application/json");
    }

    std::string metrics() const {
        const auto& c = engine_.counters();
        std::string out;
        const auto line = [&](const char* name, const char* type, const char* help, long long value) {
            out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + std::to_string(value) + "\n";
        };
        line("vwt_requests_total", "counter", "requests accepted into the queue", c.requests);
        line("vwt_requests_rejected_total", "counter", "requests refused with 503 (queue full)", c.rejected);
        line("vwt_requests_cancelled_total", "counter", "requests whose client went away before the end", c.cancelled);
        line("vwt_prompt_tokens_total", "counter", "prompt tokens prefilled", c.prompt_tokens);
        line("vwt_generated_tokens_total", "counter", "tokens sampled", c.generated_tokens);
        line("vwt_decode_steps_total", "counter", "batched forward steps", c.steps);
        line("vwt_slots_busy", "gauge", "slots decoding a request", c.busy_slots);
        line("vwt_slots", "gauge", "slots", engine_.slots());
        line("vwt_queue_depth", "gauge", "requests waiting for a slot", c.queued);
        return out;
    }

    const server_options& o_;
    const model<B>& model_;
    model_text codec_;
    int context_, max_prompt_, max_tokens_;
    std::string name_;
    std::time_t started_ = std::time(nullptr);
    std::atomic<std::int64_t> next_id_{0};
    serve_engine<B> engine_;
    httplib::Server http_;
};

}  // namespace

void add_serve_command(CLI::App& app) {
    auto o = std::make_shared<server_options>();
    auto* cmd = app.add_subcommand("serve", "serve a model over an OpenAI-compatible HTTP API (completions, chat, streaming)");
    cmd->add_option("--model", o->model, model_dir_help)->required();
    cmd->add_option("--host", o->host, "address to listen on");
    cmd->add_option("--port", o->port, "port to listen on");
    cmd->add_option("--slots", o->slots, "requests decoded together (continuous batching)");
    cmd->add_option("--queue", o->queue, "requests that may wait for a slot; more get 503");
    cmd->add_option("--max-prompt", o->max_prompt, "longest prompt in tokens (0: the context - 1)");
    cmd->add_option("--max-tokens", o->max_tokens, "most tokens a request may ask for (0: up to the context)");
    cmd->add_option("--http-threads", o->http_threads, "HTTP worker threads (0: slots + 8)");
    cmd->add_option("--name", o->name, "the model's id in the API (default: the directory's name)");
    o->device.add_to(*cmd);
    o->device.add_weights_to(*cmd);
    o->device.add_kv_to(*cmd);
    cmd->callback([o] {
        if (o->port < 1 || o->port > 65535) detail::fail("--port: must be in 1..65535, got ", o->port);
        o->model = model_dir(o->model);
        // SIGINT and SIGTERM end the server from a thread of their own (no handler, no global state)
        sigset_t signals;
        sigemptyset(&signals);
        sigaddset(&signals, SIGINT);
        sigaddset(&signals, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &signals, nullptr);
        o->device.run_inference([&]<class B>(const typename B::context& ctx) {
            const auto m = io::load_model<B>(o->model, ctx, [](const std::string& w) { std::cerr << "vwt: warning: " << w << '\n'; });
            server<B> s(*o, m, ctx);
            std::thread waiter([&] {
                int which = 0;
                sigwait(&signals, &which);
                s.stop();
            });
            std::exception_ptr failure;
            try {
                s.listen();
            } catch (...) {
                failure = std::current_exception();
            }
            pthread_kill(waiter.native_handle(), SIGTERM);  // if listen() ended otherwise: release the waiter
            waiter.join();
            if (failure) std::rethrow_exception(failure);
            std::cout << "vwt serve: stopped" << std::endl;
        });
    });
}

}  // namespace vwt::cli
