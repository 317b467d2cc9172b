// Recording client: the Java MCP SDK (io.modelcontextprotocol.sdk:mcp 2.2.0, HttpClientStreamableHttpTransport)
// for sample_logs/real-java-client-*. It prints, one timestamped line each, what the application received
// (progress, log notifications, each call's result or error) and every HTTP request the transport was about
// to send (method, Last-Event-ID): the ground truth the analyzer's verdicts are checked against. The SDK's own
// log lines (slf4j-simple, on stderr) are kept in the same file. Loopback only; every wait has a deadline.
//
//   java -cp ... RecClient http://127.0.0.1:PORT/mcp --steps 5 --call-timeout-s 15
//        [--pre sleep:0.5 --pre 'call:add:{"a":2,"b":3}' --pre ping] [--follow-up]
import java.net.URI;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import io.modelcontextprotocol.client.McpClient;
import io.modelcontextprotocol.client.McpSyncClient;
import io.modelcontextprotocol.client.transport.HttpClientStreamableHttpTransport;
import io.modelcontextprotocol.json.McpJsonDefaults;
import io.modelcontextprotocol.spec.McpSchema;

public class RecClient {

	static synchronized void log(String msg) {
		System.out.println(Instant.now().toString().replaceAll("(\\.\\d{3})\\d*Z$", "$1Z") + " " + msg);
		System.out.flush();
	}

	static String describe(McpSchema.CallToolResult r) {
		List<String> parts = new ArrayList<>();
		for (McpSchema.Content c : r.content()) {
			if (c instanceof McpSchema.TextContent t) {
				parts.add("\"" + t.text() + "\"");
			}
		}
		return "RESULT isError=" + r.isError() + " content=" + String.join(",", parts);
	}

	static void call(McpSyncClient client, String name, Map<String, Object> args, String token) {
		log("calling tools/call " + name + " " + args);
		try {
			McpSchema.CallToolRequest req = token == null ? new McpSchema.CallToolRequest(name, args)
					: new McpSchema.CallToolRequest(name, args, Map.of("progressToken", token));
			log("tools/call " + name + " " + args + " -> " + describe(client.callTool(req)));
		}
		catch (Exception e) {
			log("tools/call " + name + " " + args + " -> FAILED " + e);
		}
	}

	static void ping(McpSyncClient client) {
		try {
			client.ping();
			log("ping -> ok");
		}
		catch (Exception e) {
			log("ping -> FAILED " + e);
		}
	}

	public static void main(String[] argv) throws Exception {
		if (argv.length < 1 || argv[0].startsWith("-")) {
			System.err.println("usage: RecClient URL [options]");
			System.exit(2);
		}
		URI url = URI.create(argv[0]);
		int steps = 5;
		long callTimeoutS = 15;
		boolean followUp = false;
		List<String> pre = new ArrayList<>();
		for (int i = 1; i < argv.length; i++) {
			switch (argv[i]) {
				case "--steps" -> steps = Integer.parseInt(argv[++i]);
				case "--call-timeout-s" -> callTimeoutS = Long.parseLong(argv[++i]);
				case "--follow-up" -> followUp = true;
				case "--pre" -> pre.add(argv[++i]);
				default -> throw new IllegalArgumentException("unknown option " + argv[i]);
			}
		}
		HttpClientStreamableHttpTransport transport = HttpClientStreamableHttpTransport
			.builder(url.getScheme() + "://" + url.getAuthority())
			.endpoint(url.getPath())
			.httpRequestCustomizer((builder, method, uri, body, ctx) -> {
				String lei = builder.copy().build().headers().firstValue("Last-Event-ID").map(v -> " Last-Event-ID=" + v)
					.orElse("");
				log("http: sending " + method + lei + (body == null ? "" : " " + body));
			})
			.build();
		McpSyncClient client = McpClient.sync(transport)
			.clientInfo(new McpSchema.Implementation("java-rec-client", "0"))
			.requestTimeout(Duration.ofSeconds(callTimeoutS))
			.progressConsumer(p -> log("progress " + p.progress() + "/" + p.total() + " \"" + p.message() + "\" (token "
					+ p.progressToken() + ")"))
			.loggingConsumer(m -> log("log notification " + m.level() + ": " + m.data()))
			.build();
		McpSchema.InitializeResult init = client.initialize();
		log("initialized: protocol " + init.protocolVersion() + " server " + init.serverInfo().name());
		for (String p : pre) {
			if (p.startsWith("sleep:")) {
				Thread.sleep((long) (Double.parseDouble(p.substring(6)) * 1000));
			}
			else if (p.equals("ping")) {
				ping(client);
			}
			else if (p.startsWith("call:")) {
				String[] rest = p.substring(5).split(":", 2);
				Map<String, Object> args = rest.length == 2
						? McpJsonDefaults.getMapper().readValue(rest[1], new io.modelcontextprotocol.json.TypeRef<Map<String, Object>>() {
						}) : Map.of();
				call(client, rest[0], args, null);
			}
		}
		call(client, "slow_count", Map.of("steps", steps), "slow-count");
		if (followUp) {
			ping(client);
			try {
				List<String> names = new ArrayList<>();
				client.listTools().tools().forEach(t -> names.add(t.name()));
				log("tools/list -> " + String.join(", ", names));
			}
			catch (Exception e) {
				log("tools/list -> FAILED " + e);
			}
		}
		client.closeGracefully();
		log("closeGracefully() returned (a DELETE, if one was sent, is logged above)");
		log("client: done");
		System.exit(0);
	}

}
