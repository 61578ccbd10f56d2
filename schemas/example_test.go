package schemas_test

import (
	"encoding/json"
	"fmt"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/schemas"
)

func Example() {
	s, err := schemas.Compile(json.RawMessage(`{
		"type": "object",
		"properties": {"city": {"type": "string"}, "units": {"enum": ["metric", "imperial"]}},
		"required": ["city"],
		"additionalProperties": false
	}`))
	if err != nil {
		panic(err) // a registration error: the definition is rejected
	}
	// OpenAI sends arguments as a string that holds the object.
	_, input, err := schemas.ParseInput(json.RawMessage(`"{\"units\": \"kelvin\", \"country\": \"NO\"}"`))
	if err != nil {
		panic(err)
	}
	if details := s.Validate(input); details != nil {
		fmt.Println(schemas.InvalidInputMessage("get_weather", details))
	}
	// Output:
	// Input validation failed for tool 'get_weather':
	// /: additional property 'country' is not allowed
	// /: missing property 'city'
	// /units: value must be one of "metric", "imperial"
}

func ExampleFor() {
	type Input struct {
		City string `json:"city" jsonschema:"description=City name"`
		Days int    `json:"days,omitempty"`
	}
	fmt.Println(string(schemas.MustFor[Input]()))
	// Output:
	// {"properties":{"city":{"type":"string","description":"City name"},"days":{"type":"integer"}},"additionalProperties":false,"type":"object","required":["city"]}
}

func ExampleExport() {
	defs := []bus.ToolDef{{Name: "get_weather", Description: "Weather for a city.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)}}
	tools, err := schemas.Export(bus.FormatAnthropic, defs)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(tools[0]))
	// Output:
	// {"name":"get_weather","description":"Weather for a city.","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}
}
