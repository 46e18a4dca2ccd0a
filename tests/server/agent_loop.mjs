// A Node.js agent using contextstore as its history backend, with Node's built-ins only.
//
//   node agent_loop.mjs stdio <command> [args...]   spawns `contextstore serve --stdio`
//   node agent_loop.mjs http <url> <token-file>      talks to `contextstore serve --http`
//
// It drives a whole turn loop (create, append tool calls and results, prepare with a system
// prompt and tools, record usage, checkpoint, a bad turn, rollback, render as OpenAI,
// request_payload equal to what was prepared), the pure functions on a history it holds
// itself, and the error cases, asserting each answer.
// The last line on stdout is a JSON summary; any failed check exits non-zero.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";

class StdioTransport {
  constructor(command, args) {
    this.child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
    this.waiting = [];
    const lines = createInterface({ input: this.child.stdout });
    lines.on("line", (line) => {
      const next = this.waiting.shift();
      assert.ok(next, `an answer nobody asked for: ${line}`);
      next(JSON.parse(line));
    });
  }

  // Sends raw text; resolves with the answer, or undefined for a notification.
  send(text, expectAnswer = true) {
    this.child.stdin.write(text + "\n");
    if (!expectAnswer) return Promise.resolve(undefined);
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  async close() {
    const exited = new Promise((resolve) => this.child.on("exit", resolve));
    this.child.stdin.end();
    return exited;
  }
}

class HttpTransport {
  constructor(url, token) {
    this.url = url;
    this.token = token;
  }

  async post(text, token = this.token) {
    const headers = { "Content-Type": "application/json" };
    if (token !== null) headers.Authorization = `Bearer ${token}`;
    return fetch(this.url, { method: "POST", headers, body: text });
  }

  async send(text) {
    const response = await this.post(text);
    if (response.status === 204) return undefined;
    assert.equal(response.status, 200);
    return response.json();
  }

  async close() {
    return 0;
  }
}

let nextId = 1;
let checks = 0;

function check(condition, message) {
  assert.ok(condition, message);
  checks += 1;
}

async function call(transport, method, params) {
  const id = nextId++;
  const answer = await transport.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
  assert.equal(answer.id, id);
  return answer;
}

async function result(transport, method, params) {
  const answer = await call(transport, method, params);
  assert.equal(answer.error, undefined, `${method}: ${JSON.stringify(answer.error)}`);
  checks += 1;
  return answer.result;
}

async function failure(transport, method, params, code, errorClass) {
  const answer = await call(transport, method, params);
  assert.equal(answer.result, undefined, `${method} should fail`);
  assert.equal(answer.error.code, code, JSON.stringify(answer.error));
  if (errorClass) assert.equal(answer.error.data.error_class, errorClass);
  checks += 1;
  return answer.error;
}

const SYSTEM = "You are a careful coding agent.";
const TOOLS = [
  {
    name: "read_file",
    description: "Read a file of the workspace",
    input_schema: { type: "object", properties: { path: { type: "string" } } },
  },
];

async function agentLoop(transport, mode) {
  const conv = await result(transport, "create_conversation", {
    model_id: "gpt-4o",
    context_window: 128000,
    title: `node agent over ${mode}`,
  });
  const cid = conv.id;
  await result(transport, "append", {
    conversation_id: cid,
    role: "user",
    content: [{ type: "text", text: "<task>Fix the CSV header in report.py</task>" }],
  });

  let prepared;
  for (let turn = 0; turn < 3; turn += 1) {
    prepared = await result(transport, "prepare_request", {
      conversation_id: cid,
      system: SYSTEM,
      tools: TOOLS,
      format: "openai",
    });
    check(prepared.payload.messages[0].role === "system", "the system prompt leads");
    check(prepared.payload.tools[0].function.name === "read_file", "tools in OpenAI shape");
    check(prepared.truncated === false && Number.isInteger(prepared.request_id), "a request id");
    // The model answers with a tool call; the agent runs it and appends the result.
    const written = await result(transport, "append", {
      conversation_id: cid,
      role: "assistant",
      content: [
        { type: "text", text: `Turn ${turn}: reading.` },
        { type: "tool_use", id: `call_${turn}`, name: "read_file", input: { path: `f${turn}.py` } },
      ],
    });
    check(written.index === 1 + 2 * turn, "indices follow the appends");
    const usage = await result(transport, "record_request", {
      conversation_id: cid,
      request_id: prepared.request_id,
      tokens_in: 1000 + turn,
      tokens_out: 50,
    });
    check(usage.total_tokens === 1050 + turn, "usage recorded on the prepared request");
    await result(transport, "append", {
      conversation_id: cid,
      role: "user",
      content: [{ type: "tool_result", tool_use_id: `call_${turn}`, content: `body of f${turn}` }],
    });
  }

  const good = await result(transport, "checkpoint", { conversation_id: cid, label: "good" });
  check(good.label === "good", "checkpoint labelled");

  // A bad turn: the model calls a dangerous tool; preparing again is refused, so roll back.
  await result(transport, "append", {
    conversation_id: cid,
    role: "assistant",
    content: [{ type: "tool_use", id: "call_bad", name: "delete_everything", input: {} }],
  });
  const refused = await failure(
    transport,
    "prepare_request",
    { conversation_id: cid, system: SYSTEM, tools: TOOLS, format: "openai" },
    -32602,
    "InvalidInputError",
  );
  check(refused.data.exit_code === 2 && refused.message.includes("call_bad"), "why it refused");
  const rolled = await result(transport, "rollback", { conversation_id: cid, to: "good" });
  check(rolled.removed.messages === 1 && rolled.archived === true, "the bad turn removed");

  const openai = await result(transport, "render", { conversation_id: cid, format: "openai" });
  check(openai.length === 1 + 3 * 2, "three turns of call and result after the task");
  const call2 = openai[5];
  check(call2.role === "assistant" && call2.tool_calls[0].id === "call_2", "the last call");
  check(JSON.parse(call2.tool_calls[0].function.arguments).path === "f2.py", "JSON arguments");
  check(openai[6].role === "tool" && openai[6].tool_call_id === "call_2", "its result");

  const rebuilt = await result(transport, "request_payload", {
    conversation_id: cid,
    request_id: prepared.request_id,
  });
  assert.deepEqual(rebuilt, prepared.payload);
  checks += 1;

  // The pure functions, on a history this program holds itself (a subagent's).
  const info = await result(transport, "context_window_info", { window: 64000 });
  assert.deepEqual(info, { context_window: 64000, max_allowed_size: 37000 });
  checks += 1;
  const compact = await result(transport, "should_compact", {
    total_tokens: 37000,
    context_window: 64000,
  });
  check(compact === true, "the trigger is inclusive");
  const held = [
    { role: "user", content: "<task>subtask</task>" },
    { role: "assistant", content: "On it." },
    { role: "user", content: "first" },
    { role: "assistant", content: "one" },
    { role: "user", content: "second" },
    { role: "assistant", content: "two" },
  ];
  const range = await result(transport, "next_truncation_range", {
    messages: held,
    current_range: null,
    keep: "half",
  });
  assert.deepEqual(range, [2, 3]);
  const shortened = await result(transport, "truncated_messages", {
    messages: held,
    deleted_range: range,
  });
  assert.deepEqual(shortened, [held[0], held[1], held[4], held[5]]);
  checks += 2;
  const hardened = await result(transport, "harden_history", {
    contents: [
      { role: "user", parts: [{ text: "list files" }] },
      { role: "model", parts: [{ functionCall: { id: "c1", name: "ls", args: {} } }] },
    ],
  });
  const answered = hardened.at(-1).parts[0].functionResponse;
  check(answered.id === "c1" && answered.name === "ls", "the lost call is answered");
  await failure(transport, "should_compact", { total_tokens: -1, context_window: null }, -32602, "InvalidInputError");

  // The error cases.
  await failure(transport, "no_such_method", {}, -32601);
  const bad = await failure(transport, "append", { conversation_id: cid, role: 7 }, -32602);
  check(bad.data.problems.some((p) => p.param === "role"), "the bad param is named");
  check(bad.data.problems.some((p) => p.param === "content"), "the missing param is named");
  const missing = await failure(
    transport,
    "render",
    { conversation_id: "no-such-conversation" },
    -32003,
    "ConversationNotFoundError",
  );
  check(missing.data.exit_code === 3, "exit code of not found");
  // JSON.stringify keeps a null params (it drops only undefined): an invalid request.
  const nullParams = await failure(transport, "list_conversations", null, -32600);
  check(nullParams.data.problems[0].param === "params", "null params named as params");
  check(nullParams.message.endsWith("not null"), "null params said in JSON terms");
  const parse = await transport.send("{oops");
  check(parse.error.code === -32700 && parse.id === null, "a parse error");
  const batch = await transport.send(
    JSON.stringify([
      { jsonrpc: "2.0", method: "checkpoint", params: { conversation_id: cid, label: "note" } },
      { jsonrpc: "2.0", id: "cps", method: "checkpoints", params: { conversation_id: cid } },
    ]),
  );
  check(batch.length === 1 && batch[0].id === "cps", "one answer for one request in the batch");
  check(batch[0].result.map((c) => c.label).join() === "good,note", "the notification ran");
  if (transport instanceof HttpTransport) {
    const denied = await transport.post(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "x" }), null);
    check(denied.status === 401, "no token, no answer");
    // fetch follows redirects by default: a trailing slash must not be served by one.
    const slash = await fetch(`${transport.url}/`, {
      method: "POST",
      headers: { Authorization: `Bearer ${transport.token}`, "Content-Type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "list_conversations" }),
    });
    check(slash.status === 404 && !slash.redirected, "no redirect for /rpc/");
    const said = await slash.json();
    check(said.error.includes("POST /rpc/ is not served") && said.error.includes("POST /rpc "), said.error);
  }
  return cid;
}

async function main() {
  const [mode, ...rest] = process.argv.slice(2);
  let transport;
  if (mode === "stdio") {
    transport = new StdioTransport(rest[0], rest.slice(1));
  } else if (mode === "http") {
    transport = new HttpTransport(rest[0], readFileSync(rest[1], "utf8").trim());
  } else {
    throw new Error("usage: agent_loop.mjs stdio COMMAND [ARGS...] | http URL TOKEN_FILE");
  }
  const cid = await agentLoop(transport, mode);
  const code = await transport.close();
  assert.equal(code, 0, "the stdio server exits 0 at the end of its input");
  console.log(JSON.stringify({ ok: true, mode, checks, conversation_id: cid }));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
