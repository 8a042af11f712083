// A client of rebound proxy as an agent would be one: the official OpenAI
// SDK for its model calls and the official TypeScript MCP SDK for its
// tools, at one address (BASE_URL), each tenant with its own token
// (TOKEN_A, TOKEN_B). It prints one JSON line per step, which the test
// reads: {"step": NAME, ...what came of it}. Tenant a is given some tools
// of the stdio server "everything", b some of the streamable HTTP server
// "web". Two steps tell the test that a call is in flight, at which it
// kills the stdio server: "progress" (of a read-only call) and
// "sampling" (a side-effecting call's request to the client).
const OpenAI = require("openai");
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { CreateMessageRequestSchema } = require("@modelcontextprotocol/sdk/types.js");

const env = process.env;
const say = (step, o) => console.log(JSON.stringify({ step, ...o }));
const failure = (e) => ({ error: String(e && e.message), code: e && e.code });

// The tool calls the test kills the server during wait this long at most.
const callTimeout = Number(env.CALL_TIMEOUT_MS);

async function connect(server, token, capabilities) {
	const client = new Client({ name: "rebound-gateway-test", version: "1" }, { capabilities: capabilities || {} });
	const transport = new StreamableHTTPClientTransport(new URL(env.BASE_URL + "/mcp/" + server), {
		requestInit: { headers: { Authorization: "Bearer " + token } },
	});
	await client.connect(transport);
	return { client, transport };
}

// end ends a session (DELETE), and with it a stdio server's process.
async function end({ client, transport }) {
	await transport.terminateSession();
	await client.close();
}

function text(result) {
	return (result.content || []).filter((c) => c.type === "text").map((c) => c.text).join("");
}

// tenant lists and calls tools of server as the holder of token: its
// tools/list, one call of a tool it was given (allowed, args), and one of
// a tool it was not (refused).
async function tenant(name, server, token, allowed, args, refused, keep) {
	const session = await connect(server, token, keep ? { sampling: {} } : {});
	const { tools } = await session.client.listTools();
	say("list", { tenant: name, server, tools: tools.map((t) => t.name).sort() });
	say("call", { tenant: name, server, tool: allowed, text: text(await session.client.callTool({ name: allowed, arguments: args })) });
	try {
		await session.client.callTool({ name: refused, arguments: {} });
		say("refused", { tenant: name, server, tool: refused, answered: true });
	} catch (e) {
		say("refused", { tenant: name, server, tool: refused, ...failure(e) });
	}
	if (keep) return session;
	await end(session);
}

// elsewhere tries to open a session on a server the tenant was not given.
async function elsewhere(name, server, token) {
	try {
		await end(await connect(server, token));
		say("elsewhere", { tenant: name, server, connected: true });
	} catch (e) {
		say("elsewhere", { tenant: name, server, ...failure(e) });
	}
}

async function main() {
	// A model call of each tenant, beside the first tool call.
	const model = async (name, token) => {
		const openai = new OpenAI({ baseURL: env.BASE_URL + "/v1", apiKey: token, maxRetries: 0, timeout: 60000 });
		try {
			const c = await openai.chat.completions.create({ model: "gateway-model", max_tokens: 20, messages: [{ role: "user", content: "hi there" }] });
			say("model", { tenant: name, content: c.choices[0].message.content, tokens: c.usage && c.usage.total_tokens });
		} catch (e) {
			say("model", { tenant: name, status: e.status, ...failure(e) });
		}
	};
	const [a] = await Promise.all([
		tenant("a", "everything", env.TOKEN_A, "echo", { message: "from a" }, "get-env", true),
		model("a", env.TOKEN_A),
	]);
	await Promise.all([
		tenant("b", "web", env.TOKEN_B, "get-sum", { a: 2, b: 3 }, "echo"),
		model("b", env.TOKEN_B),
	]);
	await elsewhere("a", "web", env.TOKEN_A);
	await elsewhere("b", "everything", env.TOKEN_B);

	// A read-only call in flight when the test kills the server: it tells
	// the test at its first progress notification, and is answered.
	let progress = 0;
	try {
		const r = await a.client.callTool(
			{ name: "trigger-long-running-operation", arguments: { duration: Number(env.LONG_SECONDS), steps: Number(env.LONG_SECONDS) } },
			undefined,
			{
				timeout: callTimeout, resetTimeoutOnProgress: true,
				onprogress: () => { if (++progress === 1) say("progress", {}); },
			});
		say("read-only", { text: text(r), progress });
	} catch (e) {
		say("read-only", { progress, ...failure(e) });
	}

	// A side-effecting call in flight when the test kills the server: the
	// server asks the client for a sampling, and waits for its answer; the
	// test kills it then. Each run of the tool asks once.
	let samplings = 0;
	a.client.setRequestHandler(CreateMessageRequestSchema, (req, extra) => {
		samplings++;
		say("sampling", { n: samplings });
		return new Promise((resolve, reject) => {
			const timer = setTimeout(() => resolve({ model: "test", role: "assistant", content: { type: "text", text: "sampled" } }), callTimeout);
			extra.signal.addEventListener("abort", () => { clearTimeout(timer); reject(new Error("cancelled")); });
		});
	});
	try {
		const r = await a.client.callTool({ name: "trigger-sampling-request", arguments: { prompt: "once" } }, undefined, { timeout: callTimeout });
		say("side-effects", { text: text(r), samplings });
	} catch (e) {
		say("side-effects", { samplings, ...failure(e) });
	}
	// The session goes on, with a third server.
	say("after", { text: text(await a.client.callTool({ name: "echo", arguments: { message: "still here" } })), samplings });
	await end(a);
}

main().then(
	() => process.exit(0),
	(e) => { say("failed", failure(e)); process.exit(1); },
);
