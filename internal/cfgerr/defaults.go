package cfgerr

// Default sets *v to def when *v is its type's zero value: the module's one
// rule for config fields is that zero means the default, and "off" is a
// negative value or a named constant, documented per field.
func Default[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}
