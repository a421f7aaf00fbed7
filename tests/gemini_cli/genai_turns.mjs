// Two requests with the @google/genai SDK for tests/test_gemini_node.py: a
// function-calling turn (JSON) and a streamed answer (SSE). The base URL and
// the key come from GOOGLE_GEMINI_BASE_URL and GEMINI_API_KEY, as a user sets them.
import { GoogleGenAI } from "@google/genai";

const ai = new GoogleGenAI({});
const model = "gemini-2.5-flash";
const tools = [{ functionDeclarations: [{ name: "get_weather", parametersJsonSchema: { type: "object" } }] }];
const config = {
  systemInstruction: "You compare weather reports.",
  tools,
  thinkingConfig: { thinkingBudget: 256, includeThoughts: true },
};
const first = await ai.models.generateContent({ model, contents: "Which is warmer?", config });
const stream = await ai.models.generateContentStream({ model, contents: "Say hello.", config });
let text = "";
for await (const chunk of stream) {
  text += chunk.text ?? "";
}
console.log(JSON.stringify({ calls: first.functionCalls ?? [], text }));
