package registry

import (
	"fmt"
	"strings"
)

// ParseLabel reads one label written KEY=VALUE, as front ends take them
// (the CLI's --label, the API's label= query parameter): the key is what
// precedes the first "=" and must not be empty (Start refuses an empty
// key too); the value, which may be empty, is the rest. Its errors match
// ErrInvalidOptions, and name the text without repeating much of it.
func ParseLabel(kv string) (key, value string, err error) {
	k, v, ok := strings.Cut(kv, "=")
	if !ok || k == "" {
		return "", "", fmt.Errorf("%w: label %q: use KEY=VALUE", ErrInvalidOptions, clip(kv, 64))
	}
	return k, v, nil
}

// ParseLabels reads labels written KEY=VALUE (see ParseLabel) into a map;
// nil for none. A key given twice keeps its last value.
func ParseLabels(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, err := ParseLabel(kv)
		if err != nil {
			return nil, err
		}
		m[k] = v
	}
	return m, nil
}
