// The shared error vectors (../error-vectors.json), also run by the Python suite (tests/clients/test_error_vectors.py).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import * as client from "../src/index.js";

const { cases } = JSON.parse(readFileSync(new URL("../../error-vectors.json", import.meta.url), "utf8"));

for (const testCase of cases) {
  test(`error vector: ${testCase.name}`, () => {
    const text = typeof testCase.body === "string" ? testCase.body : JSON.stringify(testCase.body);
    const error = client.errorFromResponse(testCase.status, { "x-request-id": "req_header" }, text);
    assert.equal(Object.getPrototypeOf(error).constructor, client[testCase.class]);
    assert.equal(error.name, testCase.class);
    assert.deepEqual(
      [error.code, error.message, error.status, error.requestId],
      [testCase.code, testCase.message, testCase.status, testCase.request_id ?? "req_header"],
    );
  });
}
