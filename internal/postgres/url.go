package postgres

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
)

// ParseURL returns the database URL url in a form lib/pq reads. A URL that
// names several hosts, as pg_auto_failover and libpq write it,
//
//	postgres://user@db1:5432,db2:5433/app?target_session_attrs=read-write
//
// becomes lib/pq's keyword form,
//
//	dbname='app' host='db1,db2' port='5432,5433' target_session_attrs='read-write' user='user'
//
// since lib/pq's URL form takes one host and port only. lib/pq then tries
// the hosts in order and keeps the first that target_session_attrs accepts
// (read-write: the primary). Anything else (a URL of one host, the keyword
// form) is returned as it is.
func ParseURL(raw string) (string, error) {
	rest, ok := strings.CutPrefix(raw, "postgres://")
	if !ok {
		if rest, ok = strings.CutPrefix(raw, "postgresql://"); !ok {
			return raw, nil
		}
	}
	rest, query, _ := strings.Cut(rest, "?")
	authority, dbname, _ := strings.Cut(rest, "/")
	userinfo, hostlist := "", authority
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		userinfo, hostlist = authority[:at], authority[at+1:]
	}
	if !strings.Contains(hostlist, ",") {
		return raw, nil
	}

	params := map[string]string{}
	if userinfo != "" {
		user, password, hasPassword := strings.Cut(userinfo, ":")
		var err error
		if params["user"], err = url.PathUnescape(user); err != nil {
			return "", fmt.Errorf("user: %w", err)
		}
		if hasPassword {
			if params["password"], err = url.PathUnescape(password); err != nil {
				return "", fmt.Errorf("password: %w", err)
			}
		}
	}
	var hosts, ports []string
	anyPort := false
	for h := range strings.SplitSeq(hostlist, ",") {
		host, port, err := splitHostPort(h)
		if err != nil {
			return "", fmt.Errorf("host %q: %w", h, err)
		}
		hosts, ports = append(hosts, host), append(ports, port)
		anyPort = anyPort || port != ""
	}
	params["host"] = strings.Join(hosts, ",")
	if anyPort {
		for i, p := range ports {
			if p == "" {
				ports[i] = "5432" // lib/pq reads no empty item
			}
		}
		params["port"] = strings.Join(ports, ",")
	}
	if dbname != "" {
		name, err := url.PathUnescape(dbname)
		if err != nil {
			return "", fmt.Errorf("database name: %w", err)
		}
		params["dbname"] = name
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", fmt.Errorf("parameters: %w", err)
	}
	for k, v := range q {
		if _, taken := params[k]; taken && (k == "host" || k == "port") {
			return "", fmt.Errorf("parameter %s given both in the hosts and after ?", k)
		}
		params[k] = v[len(v)-1]
	}

	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	quote := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s='%s'", k, quote.Replace(params[k]))
	}
	return b.String(), nil
}

// splitHostPort splits one host of a URL's host list: host, host:port,
// [v6], [v6]:port, or empty (the default host); the host is unescaped
// (%2Ftmp is the socket folder /tmp).
func splitHostPort(h string) (host, port string, err error) {
	if strings.HasPrefix(h, "[") {
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return "", "", fmt.Errorf("no ] after [")
		}
		host, rest := h[1:end], h[end+1:]
		if rest != "" {
			var ok bool
			if port, ok = strings.CutPrefix(rest, ":"); !ok {
				return "", "", fmt.Errorf("%q after ]", rest)
			}
		}
		return host, port, checkPort(port)
	}
	host, port, _ = strings.Cut(h, ":")
	if host, err = url.PathUnescape(host); err != nil {
		return "", "", err
	}
	return host, port, checkPort(port)
}

func checkPort(port string) error {
	for _, c := range port {
		if c < '0' || c > '9' {
			return fmt.Errorf("port %q is not a number", port)
		}
	}
	return nil
}
