// The @google/genai SDK for tests/test_gemini_node.py: a tool loop (a call,
// then its result with an image inside the functionResponse, JSON), a streamed
// answer (SSE), and a request modeltap refuses (an image in the system
// instruction). The base URL and the key come from GOOGLE_GEMINI_BASE_URL and
// GEMINI_API_KEY, as a user sets them.
import { GoogleGenAI } from "@google/genai";

const ai = new GoogleGenAI({});
const model = "gemini-2.5-flash";
const png = Buffer.from("\x89PNG\r\n\x1a\n-a-chart-", "latin1").toString("base64");
const tools = [{ functionDeclarations: [{ name: "get_weather", parametersJsonSchema: { type: "object" } }] }];
const config = {
  systemInstruction: "You compare weather reports.",
  tools,
  thinkingConfig: { thinkingBudget: 256, includeThoughts: true },
};
const question = { role: "user", parts: [{ text: "Which is warmer?" }] };
const first = await ai.models.generateContent({ model, contents: [question], config });
const [call] = first.functionCalls ?? [];
const answer = {
  role: "user",
  parts: [
    {
      functionResponse: {
        name: call.name,
        response: { temp_c: 14 },
        parts: [{ inlineData: { mimeType: "image/png", data: png } }],
      },
    },
  ],
};
const second = await ai.models.generateContent({
  model,
  contents: [question, first.candidates[0].content, answer],
  config,
});
const stream = await ai.models.generateContentStream({ model, contents: "Say hello.", config });
let text = "";
for await (const chunk of stream) {
  text += chunk.text ?? "";
}
let refusal = null;
try {
  await ai.models.generateContent({
    model,
    contents: "Describe it.",
    config: { systemInstruction: { parts: [{ inlineData: { mimeType: "image/png", data: png } }] } },
  });
} catch (e) {
  refusal = { status: e.status, message: e.message };
}
console.log(JSON.stringify({ calls: first.functionCalls ?? [], answer: second.text, text, refusal }));
