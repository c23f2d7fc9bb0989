module github.com/demo-api/demo-api/conformance

go 1.26.8
