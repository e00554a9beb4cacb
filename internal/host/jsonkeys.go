package host

import (
	"encoding/json"
	"unicode"
)

// unmarshalSnake decodes an object into v, whose keys are snake_case,
// reading keys written as Go field names (TimeSqueeze) as their snake_case
// form (time_squeeze): evidence written before the keys had tags.
func unmarshalSnake(b []byte, v any) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return err
	}
	snake := make(map[string]json.RawMessage, len(obj))
	for k, val := range obj {
		snake[snakeCase(k)] = val
	}
	b, err := json.Marshal(snake)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func snakeCase(s string) string {
	out := make([]rune, 0, len(s)+4)
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 {
				out = append(out, '_')
			}
			r = unicode.ToLower(r)
		}
		out = append(out, r)
	}
	return string(out)
}
