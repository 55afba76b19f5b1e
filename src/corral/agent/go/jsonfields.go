package main

// Request JSON read as a raw object whose fields each route checks the way the Python agent
// does (Python's truthiness, strict integers, string dictionaries), and answers marshalled.

import (
	"bytes"
	"encoding/json"
	"strings"
)

type object map[string]json.RawMessage

func isNull(raw json.RawMessage) bool {
	return raw == nil || string(bytes.TrimSpace(raw)) == "null"
}

func decodeAny(raw json.RawMessage) any {
	if raw == nil {
		return nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return nil
	}
	return v
}

// truthy is Python's bool() of a JSON value.
func truthy(raw json.RawMessage) bool {
	switch v := decodeAny(raw).(type) {
	case nil:
		return false
	case bool:
		return v
	case json.Number:
		f, _ := v.Float64()
		return f != 0
	case string:
		return v != ""
	case []any:
		return len(v) > 0
	case map[string]any:
		return len(v) > 0
	}
	return false
}

// jsonString decodes a JSON string (ok false when it is not one).
func jsonString(raw json.RawMessage) (string, bool) {
	if raw == nil {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return decodeSurrogates(raw, s), true
}

// jsonInt decodes a JSON integer (not a float, not a bool).
func jsonInt(raw json.RawMessage) (int64, bool) {
	v, ok := decodeAny(raw).(json.Number)
	if !ok || strings.ContainsAny(string(v), ".eE") {
		return 0, false
	}
	n, err := v.Int64()
	return n, err == nil
}

func jsonStrDict(raw json.RawMessage, what string) (map[string]string, error) {
	if isNull(raw) {
		return map[string]string{}, nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil, badRequest("'%s' must be an object of strings", what)
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		s, ok := jsonString(v)
		if !ok {
			return nil, badRequest("'%s' must be an object of strings", what)
		}
		out[k] = s
	}
	return out, nil
}

func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return []byte("null")
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}
